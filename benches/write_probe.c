// One file's page-cache write rate from N threads, by the ways a writer could fill it
// (docs/performance.md, "What one file can take"):
//   gcc -O2 -pthread -o write_probe benches/write_probe.c
//   ./write_probe SIZE_MIB THREADS MODE PATH
// MODE 0: pwrite into one file; 1: a shared mapping, memcpy, after posix_fallocate;
// 2: the same with MADV_POPULATE_WRITE before each copy; 3: pwrite, one file per thread;
// 4: mapping + MADV_POPULATE_WRITE after ftruncate only (delayed allocation).
// PATH is created (and PATH.N in mode 3) and removed at the end.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static size_t total, chunk = 16 << 20; static int nthr, mode, fd, fds[64]; static char *src, *map;
static size_t next; static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *work(void *a) {
  int me = (int)(long)a;
  for (;;) {
    pthread_mutex_lock(&mu); size_t off = next; next += chunk; pthread_mutex_unlock(&mu);
    if (off >= total) return 0;
    size_t n = total - off < chunk ? total - off : chunk;
    if (mode == 0) { if (pwrite(fd, src + off, n, off) != (ssize_t)n) { perror("pwrite"); exit(1);} }
    else if (mode == 3) { if (pwrite(fds[me], src + off, n, off) != (ssize_t)n) { perror("pwrite"); exit(1);} }
    else { if ((mode == 2 || mode == 4) && madvise(map + off, n, MADV_POPULATE_WRITE)) { perror("madvise"); exit(1);} memcpy(map + off, src + off, n); }
  }
}
int main(int argc, char **argv) {
  total = (size_t)atol(argv[1]) << 20; nthr = atoi(argv[2]); mode = atoi(argv[3]);
  src = aligned_alloc(4096, total); for (size_t i = 0; i < total; i += 4096) memset(src + i, (int)(i >> 12), 4096);
  char name[512];
  unlink(argv[4]);
  fd = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (mode == 3) for (int i = 0; i < nthr; i++) { snprintf(name, sizeof name, "%s.%d", argv[4], i); fds[i] = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644); }
  double t0 = now(), tf = t0;
  if (mode == 1 || mode == 2) { if (posix_fallocate(fd, 0, total)) { perror("fallocate"); return 1; } }
  if (mode == 4 && ftruncate(fd, total)) { perror("ftruncate"); return 1; }
  tf = now();
  if (mode == 1 || mode == 2 || mode == 4) { map = mmap(0, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); if (map == MAP_FAILED) { perror("mmap"); return 1; } }
  pthread_t t[64]; for (long i = 0; i < nthr; i++) pthread_create(&t[i], 0, work, (void *)i);
  for (int i = 0; i < nthr; i++) pthread_join(t[i], 0);
  if (map) munmap(map, total);
  close(fd);
  double t1 = now();
  printf("mode %d threads %2d: %6.2f GB/s (setup %.3f s)\n", mode, nthr, total / (t1 - t0) / 1e9, tf - t0);
  unlink(argv[4]);
  if (mode == 3) for (int i = 0; i < nthr; i++) { snprintf(name, sizeof name, "%s.%d", argv[4], i); unlink(name); }
  return 0;
}
