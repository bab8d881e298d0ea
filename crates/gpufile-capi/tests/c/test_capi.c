/* The C API as a C program uses it: real files in the folder given as argv[1], host memory.
 * Built and run by tests/c_api.rs against libgpufile.a and libgpufile.so. */
#undef NDEBUG
#define _GNU_SOURCE /* setenv, O_DIRECT */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpufile/gpufile.h"

static char dir[4096];

static const char *in_dir(char *out, size_t len, const char *name) {
    int n = snprintf(out, len, "%s/%s", dir, name);
    assert(n > 0 && (size_t)n < len);
    return out;
}

static const char *last_message(void) {
    static char buf[4096];
    size_t needed = gpufile_last_error_message(buf, sizeof buf);
    assert(needed <= sizeof buf);
    return buf;
}

static const char *last_path(void) {
    static char buf[4096];
    size_t needed = gpufile_last_error_path(buf, sizeof buf);
    assert(needed <= sizeof buf);
    return buf;
}

static void fill(unsigned char *buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)((i * 31u + seed) & 0xff);
}

static void test_abi_version(void) {
    assert(gpufile_abi_version() == GPUFILE_ABI_VERSION);
}

/* Host write and read at offsets, blocking and through futures. */
static void test_round_trip(void) {
    char path[4200];
    in_dir(path, sizeof path, "round-trip.bin");
    const size_t len = (size_t)3 << 20; /* several tasks at the default task size */
    const uint64_t at = 4096 + 7;
    unsigned char *src = malloc(len), *dst = malloc(len);
    assert(src && dst);
    fill(src, len, 5);

    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK && f != NULL);
    size_t n = 0;
    assert(gpufile_file_write(f, src, len, at, &n) == GPUFILE_OK && n == len);
    assert(gpufile_file_write(f, "head", 4, 0, &n) == GPUFILE_OK && n == 4);
    uint64_t size = 0;
    assert(gpufile_file_nbytes(f, &size) == GPUFILE_OK && size == at + len);

    memset(dst, 0, len);
    assert(gpufile_file_read(f, dst, len, at, &n) == GPUFILE_OK && n == len);
    assert(memcmp(src, dst, len) == 0);
    char head[5] = {0};
    assert(gpufile_file_read(f, head, 4, 0, NULL) == GPUFILE_OK);
    assert(strcmp(head, "head") == 0);

    /* pread: a future, waited with a timeout long enough, then again (the same answer). */
    memset(dst, 0, len);
    gpufile_future *fut = NULL;
    assert(gpufile_file_pread(f, dst, len - 100, at + 100, &fut) == GPUFILE_OK && fut);
    n = 0;
    assert(gpufile_future_wait_for(fut, UINT64_C(60000000000), &n) == GPUFILE_OK);
    assert(n == len - 100);
    int done = 0;
    assert(gpufile_future_done(fut, &done) == GPUFILE_OK && done == 1);
    n = 0;
    assert(gpufile_future_wait(fut, &n) == GPUFILE_OK && n == len - 100);
    assert(memcmp(src + 100, dst, len - 100) == 0);
    assert(gpufile_future_free(fut) == GPUFILE_OK);

    /* pwrite, then a wait_for of 0 ns: done, or a timeout that says so. */
    fill(src, len, 9);
    assert(gpufile_file_pwrite(f, src, len, 0, &fut) == GPUFILE_OK);
    gpufile_status s = gpufile_future_wait_for(fut, 0, &n);
    assert(s == GPUFILE_OK || s == GPUFILE_TIMEOUT);
    if (s == GPUFILE_TIMEOUT) {
        assert(gpufile_last_error_type() == GPUFILE_TIMEOUT);
        assert(strstr(last_message(), "not done") != NULL);
    }
    assert(gpufile_future_wait(fut, &n) == GPUFILE_OK && n == len);
    assert(gpufile_future_free(fut) == GPUFILE_OK);
    assert(gpufile_file_read(f, dst, len, 0, &n) == GPUFILE_OK && n == len);
    assert(memcmp(src, dst, len) == 0);

    /* A future freed while it may still run: free waits for it, the buffer is then ours. */
    assert(gpufile_file_pread(f, dst, len, 0, &fut) == GPUFILE_OK);
    assert(gpufile_file_close(f) == GPUFILE_OK); /* the request keeps the file open */
    assert(gpufile_future_free(fut) == GPUFILE_OK);
    assert(memcmp(src, dst, len) == 0);
    free(src);
    free(dst);
}

static void test_end_of_file(void) {
    char path[4200];
    in_dir(path, sizeof path, "short.bin");
    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    assert(gpufile_file_write(f, "0123456789", 10, 0, NULL) == GPUFILE_OK);
    char buf[16];
    memset(buf, 'x', sizeof buf);
    size_t n = 12345;
    assert(gpufile_file_read(f, buf, 16, 0, &n) == GPUFILE_END_OF_FILE);
    assert(n == 12345); /* untouched on error */
    assert(buf[0] == 'x'); /* refused before any byte moved */
    assert(gpufile_last_error_type() == GPUFILE_END_OF_FILE);
    assert(strcmp(last_path(), path) == 0);
    assert(strstr(last_message(), "past the end") != NULL);
    gpufile_future *fut = NULL;
    assert(gpufile_file_pread(f, buf, 1, 10, &fut) == GPUFILE_END_OF_FILE);
    assert(fut == NULL);
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

static void test_open_errors(void) {
    char path[4200];
    gpufile_file *f = NULL;
    in_dir(path, sizeof path, "missing.bin");
    assert(gpufile_file_open(path, "r", &f) == GPUFILE_NOT_FOUND);
    assert(f == NULL);
    assert(gpufile_last_error_type() == GPUFILE_NOT_FOUND);
    assert(gpufile_last_error_errno() == 2);
    assert(strcmp(last_path(), path) == 0);

    assert(gpufile_file_open(dir, "r", &f) == GPUFILE_IS_A_DIRECTORY);

    in_dir(path, sizeof path, "flags.bin");
    assert(gpufile_file_open(path, "x", &f) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_last_error_type() == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "invalid flags") != NULL);
    assert(gpufile_file_open(path, "a", &f) == GPUFILE_BAD_ARGUMENT);
    assert(f == NULL);

    /* A path is bytes: one that is not UTF-8 is a path like another. */
    in_dir(path, sizeof path, "latin1-\xe9.bin");
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    assert(gpufile_file_close(f) == GPUFILE_OK);
    struct stat st;
    assert(stat(path, &st) == 0);

    /* A file open for reading only refuses writes, and says which file. */
    in_dir(path, sizeof path, "flags.bin");
    assert(gpufile_file_open(path, "w", &f) == GPUFILE_OK);
    assert(gpufile_file_close(f) == GPUFILE_OK);
    assert(gpufile_file_open(path, "r", &f) == GPUFILE_OK);
    assert(gpufile_file_write(f, "x", 1, 0, NULL) == GPUFILE_PERMISSION);
    assert(strcmp(last_path(), path) == 0);
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

static void test_null_pointers(void) {
    char path[4200], buf[8];
    in_dir(path, sizeof path, "null.bin");
    gpufile_file *f = NULL;
    gpufile_future *fut = NULL;
    size_t n;
    assert(gpufile_file_open(NULL, "r", &f) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "path is NULL") != NULL);
    assert(gpufile_file_open(path, NULL, &f) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_open(path, "w+", NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_read(NULL, buf, 1, 0, &n) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "file is NULL") != NULL);
    assert(gpufile_file_nbytes(NULL, NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    assert(gpufile_file_read(f, NULL, 1, 0, &n) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "buf is NULL") != NULL);
    assert(gpufile_file_write(f, NULL, 1, 0, &n) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_pread(f, buf, 1, 0, NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_nbytes(f, NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_future_wait(NULL, &n) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_future_wait_for(NULL, 0, &n) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_future_done(NULL, NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_future_free(NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_close(NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_settings_set_int(NULL, 1) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_settings_get_int("task_size", NULL) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_settings_set_str("compat_mode", NULL) == GPUFILE_BAD_ARGUMENT);
    gpufile_backend backend;
    assert(gpufile_file_io_path(f, GPUFILE_MEMORY_HOST, 1, NULL, NULL, 0, NULL) ==
           GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_io_path(NULL, GPUFILE_MEMORY_HOST, 1, &backend, NULL, 0, NULL) ==
           GPUFILE_BAD_ARGUMENT);
    (void)fut;
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

static void test_settings(void) {
    int64_t v = 0;
    assert(gpufile_settings_set_int("task_size", 1 << 20) == GPUFILE_OK);
    assert(gpufile_settings_get_int("task_size", &v) == GPUFILE_OK && v == 1 << 20);
    assert(gpufile_settings_set_str("task_size", "2MiB") == GPUFILE_OK);
    assert(gpufile_settings_get_int("task_size", &v) == GPUFILE_OK && v == 2 << 20);

    /* Refused values change nothing. */
    assert(gpufile_settings_set_int("task_size", 0) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_last_error_type() == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "task_size") != NULL);
    assert(gpufile_settings_set_int("num_threads", -1) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_settings_get_int("task_size", &v) == GPUFILE_OK && v == 2 << 20);
    assert(gpufile_settings_set_str("no_such_setting", "1") == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "unknown setting") != NULL);
    assert(gpufile_settings_get_int("no_such_setting", &v) == GPUFILE_BAD_ARGUMENT);

    /* compat_mode by word and by KvikIO's number. */
    char text[64];
    size_t needed = 0;
    assert(gpufile_settings_set_str("compat_mode", "on") == GPUFILE_OK);
    assert(gpufile_settings_get_str("compat_mode", text, sizeof text, &needed) == GPUFILE_OK);
    assert(strcmp(text, "ON") == 0 && needed == 3);
    assert(gpufile_settings_get_int("compat_mode", &v) == GPUFILE_OK && v == 1);
    assert(gpufile_settings_set_int("compat_mode", 2) == GPUFILE_OK);
    assert(gpufile_settings_get_str("compat_mode", text, sizeof text, NULL) == GPUFILE_OK);
    assert(strcmp(text, "AUTO") == 0);
    assert(gpufile_settings_set_int("compat_mode", 7) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_settings_set_str("compat_mode", "sometimes") == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_settings_get_str("compat_mode", text, sizeof text, NULL) == GPUFILE_OK);
    assert(strcmp(text, "AUTO") == 0);

    /* A list is text only; a short buffer gets a cut, NUL-terminated text and the length. */
    assert(gpufile_settings_set_str("http_status_codes", "429,503") == GPUFILE_OK);
    assert(gpufile_settings_get_int("http_status_codes", &v) == GPUFILE_BAD_ARGUMENT);
    /* The message names the setting as the caller does, not an internal type. */
    assert(strstr(last_message(), "setting \"http_status_codes\" is a list") != NULL);
    assert(strstr(last_message(), "HttpStatusCodes") == NULL);
    memset(text, '#', sizeof text);
    assert(gpufile_settings_get_str("http_status_codes", text, 4, &needed) == GPUFILE_OK);
    assert(needed == 8 && strcmp(text, "429") == 0 && text[4] == '#');
    assert(gpufile_settings_get_str("http_status_codes", NULL, 0, &needed) == GPUFILE_OK);
    assert(needed == 8);
}

/* The copy-out of the last error never writes past the length given. */
static void test_error_copy_out(void) {
    gpufile_file *f = NULL;
    assert(gpufile_file_open("/no/such/dir/file.bin", "r", &f) == GPUFILE_NOT_FOUND);
    size_t needed = gpufile_last_error_message(NULL, 0);
    assert(needed > 10);
    char buf[64];
    memset(buf, '#', sizeof buf);
    assert(gpufile_last_error_message(buf, 5) == needed);
    assert(strlen(buf) == 4 && buf[5] == '#');
    memset(buf, '#', sizeof buf);
    assert(gpufile_last_error_message(buf, 0) == needed && buf[0] == '#');
    assert(gpufile_last_error_path(buf, sizeof buf) == strlen("/no/such/dir/file.bin") + 1);
    assert(strcmp(buf, "/no/such/dir/file.bin") == 0);
}

static void *other_thread(void *arg) {
    (void)arg;
    /* A fresh thread has no last error of its own. */
    assert(gpufile_last_error_type() == GPUFILE_OK);
    assert(gpufile_last_error_message(NULL, 0) == 1);
    assert(gpufile_settings_set_int("task_size", 0) == GPUFILE_BAD_ARGUMENT);
    return NULL;
}

static void test_last_error_is_per_thread(void) {
    gpufile_file *f = NULL;
    assert(gpufile_file_open("/no/such/file", "r", &f) == GPUFILE_NOT_FOUND);
    pthread_t t;
    assert(pthread_create(&t, NULL, other_thread, NULL) == 0);
    assert(pthread_join(t, NULL) == 0);
    assert(gpufile_last_error_type() == GPUFILE_NOT_FOUND);
}

static void test_io_path(void) {
    char path[4200], reason[512];
    in_dir(path, sizeof path, "io-path.bin");
    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    gpufile_backend backend = GPUFILE_BACKEND_CUFILE;
    size_t needed = 0;
    assert(gpufile_file_io_path(f, GPUFILE_MEMORY_HOST, 1 << 20, &backend, reason,
                                sizeof reason, &needed) == GPUFILE_OK);
    assert(backend == GPUFILE_BACKEND_POSIX);
    assert(needed > 1 && needed <= sizeof reason && strlen(reason) == needed - 1);
    assert(strstr(reason, "host") != NULL);
    assert(gpufile_file_io_path(f, 5, 1, &backend, NULL, 0, NULL) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "GPUFILE_MEMORY_HOST") != NULL);
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

/* An S3 object's URL, copied out as every text getter copies: sized with a NULL buffer, cut
 * and NUL-terminated in a short one, whole in a large one; a refusal leaves both as they were. */
static void test_s3_object_url(void) {
    assert(setenv("AWS_ACCESS_KEY_ID", "AKID", 1) == 0);
    assert(setenv("AWS_SECRET_ACCESS_KEY", "secret", 1) == 0);
    assert(unsetenv("AWS_ENDPOINT_URL") == 0);
    const char *want = "http://127.0.0.1:9000/bkt/a%20b/c.bin";
    const char *at = "http://127.0.0.1:9000";
    size_t needed = 0;
    assert(gpufile_remote_s3_object_url(NULL, "bkt", "a b/c.bin", "us-east-1", at, NULL, 0,
                                        &needed) == GPUFILE_OK);
    assert(needed == strlen(want) + 1);
    char buf[128];
    memset(buf, '#', sizeof buf);
    needed = 0;
    assert(gpufile_remote_s3_object_url(NULL, "bkt", "a b/c.bin", "us-east-1", at, buf, 8,
                                        &needed) == GPUFILE_OK);
    assert(needed == strlen(want) + 1 && strlen(buf) == 7 && strncmp(buf, want, 7) == 0);
    assert(buf[8] == '#');
    assert(gpufile_remote_s3_object_url("s3://bkt/k", NULL, NULL, "eu-west-1", NULL, buf,
                                        sizeof buf, NULL) == GPUFILE_OK);
    assert(strcmp(buf, "https://bkt.s3.eu-west-1.amazonaws.com/k") == 0);
    memset(buf, '#', sizeof buf);
    needed = 99;
    assert(gpufile_remote_s3_object_url(NULL, "", "k", "us-east-1", at, buf, sizeof buf,
                                        &needed) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "must not be empty") != NULL);
    assert(buf[0] == '#' && needed == 99);
    assert(unsetenv("AWS_ACCESS_KEY_ID") == 0 && unsetenv("AWS_SECRET_ACCESS_KEY") == 0);
}

/* Handles closed or freed already, and pointers gpufile never gave out, are refused. */
static void test_stale_handles(void) {
    char path[4200], buf[4] = {0};
    in_dir(path, sizeof path, "stale.bin");
    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    assert(gpufile_file_write(f, "abcd", 4, 0, NULL) == GPUFILE_OK);
    gpufile_future *fut = NULL;
    assert(gpufile_file_pread(f, buf, 4, 0, &fut) == GPUFILE_OK);
    assert(gpufile_future_free(fut) == GPUFILE_OK);
    assert(memcmp(buf, "abcd", 4) == 0);
    size_t n = 0;
    assert(gpufile_future_wait(fut, &n) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "not an open gpufile_future") != NULL);
    assert(gpufile_future_free(fut) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_close(f) == GPUFILE_OK);
    assert(gpufile_file_close(f) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "closed or freed already") != NULL);
    assert(gpufile_file_read(f, buf, 4, 0, &n) == GPUFILE_BAD_ARGUMENT);
    uint64_t size;
    assert(gpufile_file_nbytes(f, &size) == GPUFILE_BAD_ARGUMENT);
    /* Not a handle at all: a file's number is no future, nor is an arbitrary pointer a file. */
    assert(gpufile_file_open(path, "r", &f) == GPUFILE_OK);
    assert(gpufile_future_wait((gpufile_future *)(void *)f, &n) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_nbytes((gpufile_file *)(void *)buf, &size) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_nbytes(f, &size) == GPUFILE_OK && size == 4);
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

/* Sizes no buffer can have, and offsets no file reaches, are refused before any byte moves. */
static void test_bad_sizes(void) {
    char path[4200], buf[8] = {0};
    in_dir(path, sizeof path, "sizes.bin");
    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    assert(gpufile_file_write(f, "abcdefgh", 8, 0, NULL) == GPUFILE_OK);
    size_t n = 0;
    assert(gpufile_file_read(f, buf, SIZE_MAX, 0, &n) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "address space") != NULL);
    assert(gpufile_file_write(f, buf, SIZE_MAX / 2 + 1, 0, &n) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_read(f, buf, 8, UINT64_MAX, &n) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "past the largest file offset") != NULL);
    assert(gpufile_file_write(f, buf, 8, UINT64_MAX - 2, &n) == GPUFILE_BAD_ARGUMENT);
    assert(strcmp(buf, "") == 0); /* nothing was read into it */
    uint64_t size = 0;
    assert(gpufile_file_nbytes(f, &size) == GPUFILE_OK && size == 8);
    assert(gpufile_file_read(f, buf, 0, 8, &n) == GPUFILE_OK && n == 0);
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

/* The page-cache helpers open a path (fd -1) as every entry does: a FIFO is refused at once,
 * and a drop at an offset no file has names the argument. */
static void test_page_cache(void) {
    char path[4200];
    in_dir(path, sizeof path, "pc-fifo");
    assert(mkfifo(path, 0600) == 0);
    uint64_t cached = 1, total = 1;
    alarm(30); /* an open that waits for a writer ends the program instead of hanging it */
    assert(gpufile_page_cache_info(-1, path, 0, 0, &cached, &total) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_last_error_errno() == ESPIPE);
    assert(strstr(last_message(), "is a FIFO") != NULL);
    assert(gpufile_drop_file_page_cache(-1, path, 0, 0, 1) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_last_error_errno() == ESPIPE);
    alarm(0);
    assert(cached == 1 && total == 1);

    in_dir(path, sizeof path, "pc.bin");
    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w", &f) == GPUFILE_OK);
    assert(gpufile_file_write(f, "0123456789", 10, 0, NULL) == GPUFILE_OK);
    assert(gpufile_file_close(f) == GPUFILE_OK);
    assert(gpufile_drop_file_page_cache(-1, path, UINT64_MAX, 0, 0) == GPUFILE_BAD_ARGUMENT);
    assert(strstr(last_message(), "offset 18446744073709551615 is past the largest file offset"));
    assert(gpufile_page_cache_info(-1, path, 0, 0, &cached, &total) == GPUFILE_OK && total == 1);
}

/* KvikIO's and gpufile's environment variables are read at the first call. */
/* The O_DIRECT descriptor is the file's second one, opened with O_DIRECT, or -1 where the file
 * system refuses it; the buffered one has no O_DIRECT. */
static void test_descriptors(void) {
    char path[4200];
    in_dir(path, sizeof path, "descriptors.bin");
    gpufile_file *f = NULL;
    assert(gpufile_file_open(path, "w+", &f) == GPUFILE_OK);
    int fd = -1, direct = -1;
    assert(gpufile_file_fd(f, 0, &fd) == GPUFILE_OK && fd >= 0);
    assert((fcntl(fd, F_GETFL) & O_DIRECT) == 0);
    assert(gpufile_file_fd(f, 1, &direct) == GPUFILE_OK);
    if (direct >= 0) {
        assert(direct != fd);
        assert((fcntl(direct, F_GETFL) & O_DIRECT) != 0);
    }
    int again = -2;
    assert(gpufile_file_fd(f, 1, &again) == GPUFILE_OK && again == direct);
    assert(gpufile_file_close(f) == GPUFILE_OK);
}

static void test_environment(void) {
    const char *want = getenv("EXPECT_NUM_THREADS");
    if (want == NULL) return;
    int64_t v = 0;
    assert(gpufile_settings_get_int("num_threads", &v) == GPUFILE_OK);
    assert(v == atoll(want));
}

int main(int argc, char **argv) {
    assert(argc == 2);
    assert(strlen(argv[1]) < sizeof dir);
    strcpy(dir, argv[1]);
    test_environment(); /* first: before any setting changes */
    test_abi_version();
    test_round_trip();
    test_end_of_file();
    test_open_errors();
    test_null_pointers();
    test_settings();
    test_error_copy_out();
    test_last_error_is_per_thread();
    test_io_path();
    test_s3_object_url();
    test_stale_handles();
    test_bad_sizes();
    test_page_cache();
    test_descriptors();
    puts("test_capi: all passed");
    return 0;
}
