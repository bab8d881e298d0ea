/* gpufile_file_from_fd and gpufile_future_cancel from C (what NIXL's GPUFILE backend calls for
 * FILE descriptors by fd and for releasing a running transfer), on real files in the folder
 * argv[1]. Built and run by tests/c_api.rs. */
#undef NDEBUG
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpufile/gpufile.h"

static const char *last_message(void) {
    static char buf[4096];
    gpufile_last_error_message(buf, sizeof buf);
    return buf;
}

enum { LEN = 1 << 20, BIG = 16 << 20 };

static void from_fd(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/fd.bin", dir);
    unsigned char *data = malloc(LEN), *back = calloc(1, LEN);
    assert(data && back);
    for (size_t i = 0; i < LEN; i++) data[i] = (unsigned char)(i * 7u + 3u);
    FILE *f = fopen(path, "wb");
    assert(f && fwrite(data, 1, LEN, f) == LEN && fclose(f) == 0);

    int fd = open(path, O_RDONLY);
    assert(fd >= 0);
    off_t before = lseek(fd, 123, SEEK_SET);
    gpufile_file *h = NULL;
    assert(gpufile_file_from_fd(fd, NULL, &h) == GPUFILE_OK);
    /* The handle's descriptor is its own: the caller's may close, its offset stays. */
    assert(lseek(fd, 0, SEEK_CUR) == before);
    assert(close(fd) == 0);
    size_t n = 0;
    assert(gpufile_file_read(h, back, LEN, 0, &n) == GPUFILE_OK && n == LEN);
    assert(memcmp(back, data, LEN) == 0);
    /* fd's access mode: read-only, so a write is refused. */
    assert(gpufile_file_write(h, data, 16, 0, NULL) == GPUFILE_PERMISSION);
    assert(gpufile_file_close(h) == GPUFILE_OK);

    /* A descriptor that is not open: EBADF, naming the descriptor. */
    h = NULL;
    assert(gpufile_file_from_fd(fd, NULL, &h) == GPUFILE_OTHER && h == NULL);
    assert(gpufile_last_error_errno() == EBADF);
    char want[32];
    snprintf(want, sizeof want, "fd %d", fd);
    assert(strstr(last_message(), want));
    assert(gpufile_file_from_fd(-1, "x", &h) == GPUFILE_BAD_ARGUMENT);
    free(data);
    free(back);
}

static void cancel(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/big.bin", dir);
    FILE *f = fopen(path, "wb");
    assert(f);
    unsigned char *data = malloc(BIG);
    assert(data);
    memset(data, 0xab, BIG);
    assert(fwrite(data, 1, BIG, f) == BIG && fclose(f) == 0);
    /* One worker, 4 KiB tasks: 4096 tasks, most not started when the cancel comes. */
    assert(gpufile_settings_set_int("num_threads", 1) == GPUFILE_OK);
    assert(gpufile_settings_set_int("task_size", 4096) == GPUFILE_OK);
    gpufile_file *h = NULL;
    assert(gpufile_file_open(path, "r", &h) == GPUFILE_OK);
    memset(data, 0, BIG);
    gpufile_future *fut = NULL;
    assert(gpufile_file_pread(h, data, BIG, 0, &fut) == GPUFILE_OK);
    assert(gpufile_future_cancel(fut) == GPUFILE_OK);
    assert(gpufile_future_wait(fut, NULL) == GPUFILE_OTHER);
    assert(strstr(last_message(), "cancel"));
    /* The skipped tasks moved nothing: the buffer's end keeps its zeros. */
    assert(data[BIG - 1] == 0);
    assert(gpufile_future_free(fut) == GPUFILE_OK);
    assert(gpufile_future_cancel(fut) == GPUFILE_BAD_ARGUMENT);
    assert(gpufile_file_close(h) == GPUFILE_OK);
    free(data);
}

int main(int argc, char **argv) {
    assert(argc == 2);
    from_fd(argv[1]);
    cancel(argv[1]);
    puts("test_fd_cancel: all passed");
    return 0;
}
