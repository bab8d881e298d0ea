/* KvikIO 26.10's observation API as gpufile's C ABI serves it: a monitor's callbacks see one
 * observation per read (however many tasks it runs as) with gpufile's path and reason, a
 * summary monitor counts the same reads, and a summary survives its bytes. Real files in the
 * folder argv[1], host memory. Built and run by tests/c_api.rs. */
#define _POSIX_C_SOURCE 200809L
#undef NDEBUG
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufile/gpufile.h"

enum { LEN = 1 << 20 };

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    assert(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct seen {
    int starts, finishes;
    uint64_t start_ns, end_ns;
    uint64_t bytes, tasks;
    char path[32], reason[256], source[4096];
    uint8_t backend, ok;
};

static void on_start(void *ctx, const gpufile_io_observation *op) {
    struct seen *s = ctx;
    s->starts++;
    assert(op->end_ns == op->start_ns && op->bytes_transferred == 0);
}

static void on_finish(void *ctx, const gpufile_io_observation *op) {
    struct seen *s = ctx;
    s->finishes++;
    s->start_ns = op->start_ns;
    s->end_ns = op->end_ns;
    s->bytes += op->bytes_transferred;
    s->tasks = op->tasks;
    s->backend = op->backend;
    s->ok = op->ok;
    assert(op->end_ns >= op->start_ns && op->http_method == NULL);
    snprintf(s->path, sizeof s->path, "%s", op->path);
    snprintf(s->reason, sizeof s->reason, "%.*s", (int)op->reason_len, op->reason);
    snprintf(s->source, sizeof s->source, "%.*s", (int)op->source_len, op->source);
}

int main(int argc, char **argv) {
    assert(argc == 2);
    char path[4200];
    snprintf(path, sizeof path, "%s/data.bin", argv[1]);
    unsigned char *data = malloc(LEN), *buf = malloc(LEN);
    assert(data && buf);
    for (size_t i = 0; i < LEN; i++) data[i] = (unsigned char)(i * 13u + 5u);
    FILE *f = fopen(path, "wb");
    assert(f && fwrite(data, 1, LEN, f) == LEN && fclose(f) == 0);

    struct seen seen = {0};
    uint64_t id = 0;
    assert(gpufile_monitor_register(on_start, on_finish, &seen, &id) == GPUFILE_OK);
    gpufile_summary_monitor *mon = NULL;
    assert(gpufile_summary_monitor_new(&mon) == GPUFILE_OK);
    assert(gpufile_settings_set_int("task_size", 64 << 10) == GPUFILE_OK);

    gpufile_file *h = NULL;
    assert(gpufile_file_open(path, "r", &h) == GPUFILE_OK);
    size_t n = 0;
    uint64_t before = monotonic_ns();
    assert(gpufile_file_read(h, buf, LEN, 0, &n) == GPUFILE_OK && n == LEN);
    uint64_t after = monotonic_ns();
    assert(memcmp(buf, data, LEN) == 0);
    /* Timestamps are CLOCK_MONOTONIC (std::chrono::steady_clock), to within a microsecond. */
    assert(seen.start_ns + 1000 >= before && seen.end_ns <= after + 1000);
    assert(seen.start_ns <= seen.end_ns);
    assert(gpufile_monitor_unregister(id) == GPUFILE_OK);
    assert(gpufile_file_read(h, buf, 4096, 0, &n) == GPUFILE_OK && n == 4096);

    /* One read of 16 tasks: one observation, on gpufile's own path, saying why. */
    assert(seen.starts == 1 && seen.finishes == 1 && seen.bytes == LEN && seen.ok == 1);
    assert(seen.tasks == LEN / (64 << 10));
    assert(seen.backend == 0 && strcmp(seen.path, "gpufile-posix") == 0);
    assert(strstr(seen.reason, "host buffer") == seen.reason);
    assert(strcmp(seen.source, path) == 0);
    assert(strcmp(gpufile_io_backend_name(seen.backend), "POSIX") == 0);

    gpufile_summary *s = NULL;
    assert(gpufile_summary_monitor_get(mon, NULL, &s) == GPUFILE_OK);
    gpufile_summary_values v;
    assert(gpufile_summary_values_get(s, &v) == GPUFILE_OK);
    assert(v.num_ops == 2 && v.num_reads == 2 && v.bytes_read == LEN + 4096);
    assert(v.by_backend[0].num_ops == 2 && v.busy_ns <= v.wall_ns && v.num_errors == 0);
    char text[8192];
    size_t needed = 0;
    assert(gpufile_summary_text(s, 1, text, sizeof text, &needed) == GPUFILE_OK);
    assert(needed <= sizeof text && strstr(text, "KvikIO I/O summary"));
    assert(strstr(text, "path gpufile-posix") && strstr(text, "host buffer"));
    assert(gpufile_summary_text(s, 0, text, sizeof text, &needed) == GPUFILE_OK);
    assert(strstr(text, "\"path\": \"gpufile-posix\""));

    /* The bytes round trip, and the copy is still a baseline for the monitor. */
    assert(gpufile_summary_serialize(s, NULL, 0, &needed) == GPUFILE_OK && needed > 16);
    unsigned char *raw = malloc(needed);
    size_t len = needed;
    assert(gpufile_summary_serialize(s, raw, len, &needed) == GPUFILE_OK && needed == len);
    gpufile_summary *back = NULL, *interval = NULL;
    assert(gpufile_summary_deserialize(raw, len, &back) == GPUFILE_OK);
    assert(gpufile_summary_deserialize(raw, len - 1, &interval) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_read(h, buf, 4096, 8192, &n) == GPUFILE_OK);
    assert(gpufile_summary_monitor_get(mon, back, &interval) == GPUFILE_OK);
    assert(gpufile_summary_values_get(interval, &v) == GPUFILE_OK && v.num_ops == 1);
    /* An interval cannot be a baseline. */
    gpufile_summary *bad = NULL;
    assert(gpufile_summary_since(s, interval, &bad) == GPUFILE_BAD_ARGUMENT);

    gpufile_counters c;
    assert(gpufile_counters_get(&c) == GPUFILE_OK && c.remote_size_probes == 0);
    uint64_t steady = 0;
    int64_t wall = 0;
    assert(gpufile_clock_anchor(&steady, &wall) == GPUFILE_OK && wall > 0);

    assert(gpufile_summary_free(s) == GPUFILE_OK && gpufile_summary_free(back) == GPUFILE_OK);
    assert(gpufile_summary_free(interval) == GPUFILE_OK);
    assert(gpufile_summary_free(interval) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_summary_monitor_free(mon) == GPUFILE_OK);
    assert(gpufile_file_close(h) == GPUFILE_OK);
    free(raw);
    free(data);
    free(buf);
    printf("test_observation: all passed\n");
    return 0;
}
