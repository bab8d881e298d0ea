/* gpufile_batch_submit from C: many operations on real files in the folder argv[1], host
 * memory; one request (one future) per file, buffer and direction, the bytes checked, and every
 * refused submission leaving files and buffers as they were. Built and run by tests/c_api.rs. */
#undef NDEBUG
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufile/gpufile.h"

static char dir[4096];

static const char *in_dir(char *out, size_t len, const char *name) {
    int n = snprintf(out, len, "%s/%s", dir, name);
    assert(n > 0 && (size_t)n < len);
    return out;
}

static const char *last_message(void) {
    static char buf[4096];
    gpufile_last_error_message(buf, sizeof buf);
    return buf;
}

static void fill(unsigned char *buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)((i * 31u + seed) & 0xff);
}

/* A file of `len` known bytes (`seed`), opened with `flags`; its bytes in `*bytes`. */
static gpufile_file *make_file(const char *name, size_t len, unsigned seed, const char *flags,
                               unsigned char **bytes) {
    char path[4200];
    in_dir(path, sizeof path, name);
    unsigned char *data = malloc(len);
    assert(data);
    fill(data, len, seed);
    FILE *f = fopen(path, "wb");
    assert(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
    gpufile_file *h = NULL;
    assert(gpufile_file_open(path, flags, &h) == GPUFILE_OK);
    if (bytes) {
        *bytes = data;
    } else {
        free(data);
    }
    return h;
}

/* The `ops` count of gpufile's own path in an observation's JSON. */
static long posix_requests(const char *json) {
    const char *at = strstr(json, "\"gpufile-posix\":{");
    assert(at);
    at = strstr(at, "\"ops\":");
    assert(at);
    return strtol(at + 6, NULL, 10);
}

enum { FILE_LEN = 1 << 20, NA = 64, NB = 8, NW = 3, N = NA + NB + NW };

/* 64 reads of one file into one buffer, 8 of another into another, 3 writes: three requests. */
static void test_groups_run_as_one_request_each(void) {
    unsigned char *a_bytes = NULL, *b_bytes = NULL;
    gpufile_file *a = make_file("a.bin", FILE_LEN, 1, "r", &a_bytes);
    gpufile_file *b = make_file("b.bin", FILE_LEN, 2, "r", &b_bytes);
    gpufile_file *w = make_file("w.bin", 1 << 16, 3, "r+", NULL);
    static unsigned char out_a[NA * 4096], out_b[NB * 1000], src[NW * 512];
    memset(src, 0xC3, sizeof src);
    gpufile_batch_op ops[N];
    size_t n = 0, a_at[NA];
    for (size_t i = 0; i < NA; i++) {
        a_at[i] = (i * 7919) % 250 * 4096;
        ops[n++] = (gpufile_batch_op){a, out_a, a_at[i], i * 4096, 4096, 0};
        if (i % 8 == 3)
            ops[n++] = (gpufile_batch_op){b, out_b, 12345 + i / 8 * 3000, i / 8 * 1000, 1000, 0};
        if (i % 20 == 5)
            ops[n++] = (gpufile_batch_op){w, src, 9000 + i / 20 * 1000, i / 20 * 512, 512, 1};
    }
    assert(n == N);
    gpufile_observation *obs = NULL;
    assert(gpufile_observe_begin(&obs) == GPUFILE_OK);
    gpufile_future *futs[N];
    size_t group[N], ngroups = 0;
    assert(gpufile_batch_submit(ops, N, NULL, futs, group, &ngroups) == GPUFILE_OK);
    assert(ngroups == 3);
    size_t bytes[3] = {0, 0, 0};
    for (size_t g = 0; g < ngroups; g++)
        assert(gpufile_future_wait(futs[g], &bytes[g]) == GPUFILE_OK);
    /* Groups in the order of their first operation: a's reads, b's reads, the writes. */
    for (size_t i = 0; i < N; i++) {
        size_t want = ops[i].is_write ? 2 : ops[i].file == a ? 0 : 1;
        assert(group[i] == want);
    }
    assert(bytes[0] == NA * 4096 && bytes[1] == NB * 1000 && bytes[2] == NW * 512);
    static char json[1 << 16];
    size_t needed = 0;
    assert(gpufile_observe_end(obs, json, sizeof json, &needed) == GPUFILE_OK);
    if (posix_requests(json) != 3) {
        fprintf(stderr, "3 requests expected: %s\n", json);
        abort();
    }
    for (size_t i = 0; i < NA; i++) assert(memcmp(out_a + i * 4096, a_bytes + a_at[i], 4096) == 0);
    for (size_t k = 0; k < NB; k++)
        assert(memcmp(out_b + k * 1000, b_bytes + 12345 + k * 3000, 1000) == 0);
    unsigned char back[512];
    for (size_t k = 0; k < NW; k++) {
        assert(gpufile_file_read(w, back, 512, 9000 + k * 1000, NULL) == GPUFILE_OK);
        assert(memcmp(back, src, 512) == 0);
    }
    for (size_t g = 0; g < ngroups; g++) assert(gpufile_future_free(futs[g]) == GPUFILE_OK);
    /* No operation: no group. */
    ngroups = 7;
    assert(gpufile_batch_submit(NULL, 0, NULL, NULL, NULL, &ngroups) == GPUFILE_OK && ngroups == 0);
    gpufile_file_close(a);
    gpufile_file_close(b);
    gpufile_file_close(w);
    free(a_bytes);
    free(b_bytes);
}

/* A write first, then a bad operation: refused with its type and message, nothing moved. */
static void test_a_refused_operation_moves_no_byte(void) {
    unsigned char *w_bytes = NULL;
    gpufile_file *w = make_file("rw.bin", 1 << 16, 4, "r+", &w_bytes);
    gpufile_file *r = make_file("r.bin", 1 << 16, 5, "r", NULL);
    gpufile_file *r2 = make_file("r2.bin", 1 << 16, 6, "r", NULL);
    gpufile_file *closed = make_file("closed.bin", 16, 7, "r", NULL);
    assert(gpufile_file_close(closed) == GPUFILE_OK);
    static unsigned char src[1 << 15], out[8192];
    memset(src, 0xEE, sizeof src);
    memset(out, 0x5A, sizeof out);
    const gpufile_batch_op write = {w, src, 0, 0, sizeof src, 1};
    struct {
        gpufile_batch_op bad;
        gpufile_status status;
        const char *says;
    } cases[] = {
        {{r, out, (1 << 16) - 10, 4096, 100, 0}, GPUFILE_END_OF_FILE, "past the end"},
        {{r, out, 8192, 4000, 100, 0}, GPUFILE_BAD_ARGUMENT, "ranges overlap in the buffer"},
        {{r2, out, 0, 4000, 100, 0}, GPUFILE_BAD_ARGUMENT, "of the batch overlap in the buffer"},
        {{r, src, 0, 0, 10, 1}, GPUFILE_PERMISSION, "not open for writing"},
        {{r, NULL, 0, 0, 10, 0}, GPUFILE_BAD_ARGUMENT, "ops[2]: buf is NULL"},
        {{closed, out, 0, 0, 10, 0}, GPUFILE_BAD_ARGUMENT, "ops[2]: file"},
        {{r, out, 0, 0, 10, 2}, GPUFILE_BAD_ARGUMENT, "ops[2]: is_write 2"},
        {{r, out, 0, SIZE_MAX, 2, 0}, GPUFILE_BAD_ARGUMENT, "overflows"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gpufile_batch_op ops[3] = {write, {r, out, 0, 0, 4096, 0}, cases[c].bad};
        gpufile_future *futs[3] = {NULL, NULL, NULL};
        size_t group[3] = {9, 9, 9}, ngroups = 9;
        gpufile_status s = gpufile_batch_submit(ops, 3, NULL, futs, group, &ngroups);
        if (s != cases[c].status || !strstr(last_message(), cases[c].says)) {
            fprintf(stderr, "case %zu: status %d, %s\n", c, (int)s, last_message());
            abort();
        }
        assert(ngroups == 9 && group[0] == 9 && futs[0] == NULL);
        unsigned char now[1 << 16];
        assert(gpufile_file_read(w, now, sizeof now, 0, NULL) == GPUFILE_OK);
        assert(memcmp(now, w_bytes, sizeof now) == 0);
        for (size_t i = 0; i < sizeof out; i++) assert(out[i] == 0x5A);
    }
    gpufile_future *futs[1];
    size_t group[1], ngroups = 0;
    assert(gpufile_batch_submit(NULL, 1, NULL, futs, group, &ngroups) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "ops is NULL"));
    const gpufile_batch_op one = {r, out, 0, 0, 10, 0};
    assert(gpufile_batch_submit(&one, 1, NULL, futs, group, NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_batch_submit(&one, 1, NULL, NULL, group, &ngroups) == GPUFILE_BAD_ARGUMENT);
    gpufile_file_close(w);
    gpufile_file_close(r);
    gpufile_file_close(r2);
    free(w_bytes);
}

/* Writes of two buffers to the same bytes of one file (through two handles of it, or one) are
 * refused, naming the two operations and the shared bytes; the file is left as it was. */
static void test_writes_to_the_same_bytes_are_refused(void) {
    unsigned char *bytes = NULL;
    gpufile_file *w = make_file("same.bin", 1 << 16, 9, "r+", &bytes);
    char path[4200];
    gpufile_file *again = NULL;
    assert(gpufile_file_open(in_dir(path, sizeof path, "same.bin"), "r+", &again) == GPUFILE_OK);
    gpufile_file *other = make_file("other.bin", 1 << 16, 10, "r+", NULL);
    static unsigned char a[8192], b[8192];
    memset(a, 0xAA, sizeof a);
    memset(b, 0xBB, sizeof b);
    struct {
        gpufile_batch_op ops[3];
        const char *says;
    } cases[] = {
        {{{w, a, 0, 0, 8192, 1}, {other, b, 0, 0, 8192, 1}, {again, b, 4096, 0, 8192, 1}},
         "operations 0 and 2 of the batch write the same bytes of"},
        {{{other, a, 0, 0, 10, 1}, {w, a, 1000, 0, 100, 1}, {w, b, 1050, 0, 100, 1}},
         "operations 1 and 2 of the batch write the same bytes of"},
    };
    const char *range[] = {"(bytes 4096..8192)", "(bytes 1050..1100)"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gpufile_future *futs[3] = {NULL, NULL, NULL};
        size_t group[3] = {9, 9, 9}, ngroups = 9;
        gpufile_status s = gpufile_batch_submit(cases[c].ops, 3, NULL, futs, group, &ngroups);
        if (s != GPUFILE_BAD_ARGUMENT || !strstr(last_message(), cases[c].says) ||
            !strstr(last_message(), range[c]) || !strstr(last_message(), "same.bin")) {
            fprintf(stderr, "case %zu: status %d, %s\n", c, (int)s, last_message());
            abort();
        }
        assert(ngroups == 9 && futs[0] == NULL);
        unsigned char now[1 << 16];
        assert(gpufile_file_read(w, now, sizeof now, 0, NULL) == GPUFILE_OK);
        assert(memcmp(now, bytes, sizeof now) == 0);
    }
    /* Adjacent bytes through the two handles are fine. */
    const gpufile_batch_op ok[2] = {{w, a, 0, 0, 4096, 1}, {again, b, 4096, 0, 4096, 1}};
    gpufile_future *futs[2];
    size_t group[2], ngroups = 0;
    assert(gpufile_batch_submit(ok, 2, NULL, futs, group, &ngroups) == GPUFILE_OK);
    for (size_t g = 0; g < ngroups; g++) {
        size_t n = 0;
        assert(gpufile_future_wait(futs[g], &n) == GPUFILE_OK && n == 4096);
        assert(gpufile_future_free(futs[g]) == GPUFILE_OK);
    }
    unsigned char now[8192];
    assert(gpufile_file_read(w, now, sizeof now, 0, NULL) == GPUFILE_OK);
    assert(memcmp(now, a, 4096) == 0 && memcmp(now + 4096, b, 4096) == 0);
    gpufile_file_close(w);
    gpufile_file_close(again);
    gpufile_file_close(other);
    free(bytes);
}

/* Options apply to every group; a bad one is refused before anything starts. */
static void test_options(void) {
    unsigned char *bytes = NULL;
    gpufile_file *f = make_file("opts.bin", 1 << 16, 8, "r", &bytes);
    static unsigned char out[16 * 1000];
    gpufile_batch_op ops[16];
    for (size_t i = 0; i < 16; i++)
        ops[i] = (gpufile_batch_op){f, out, i * 4000, i * 1000, 1000, 0};
    const gpufile_io_options bad = {0, -1, 7};
    gpufile_future *futs[16];
    size_t group[16], ngroups = 9;
    assert(gpufile_batch_submit(ops, 16, &bad, futs, group, &ngroups) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "compat_mode 7") && ngroups == 9);
    const gpufile_io_options opts = {2000, -1, 2};
    assert(gpufile_batch_submit(ops, 16, &opts, futs, group, &ngroups) == GPUFILE_OK);
    assert(ngroups == 1);
    size_t n = 0;
    assert(gpufile_future_wait(futs[0], &n) == GPUFILE_OK && n == sizeof out);
    assert(gpufile_future_free(futs[0]) == GPUFILE_OK);
    for (size_t i = 0; i < 16; i++) assert(memcmp(out + i * 1000, bytes + i * 4000, 1000) == 0);
    gpufile_file_close(f);
    free(bytes);
}

int main(int argc, char **argv) {
    assert(argc == 2);
    assert(strlen(argv[1]) < sizeof dir);
    strcpy(dir, argv[1]);
    test_groups_run_as_one_request_each();
    test_a_refused_operation_moves_no_byte();
    test_writes_to_the_same_bytes_are_refused();
    test_options();
    puts("test_batch: all passed");
    return 0;
}
