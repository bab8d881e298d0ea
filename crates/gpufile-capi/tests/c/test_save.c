/* gpufile_save_checkpoint from C: six host tensors saved as a sharded checkpoint into the
 * directory argv[1] (created), then a bad dtype refused with a typed error. The test that runs
 * it (tests/c_api.rs) loads the result with the core's loader. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpufile/gpufile.h"

#define N 6
#define ELEMS 1000

static float data[N][ELEMS];

static const char* last_error(void)
{
  static char buf[1024];
  gpufile_last_error_message(buf, sizeof buf);
  return buf;
}

int main(int argc, char** argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  char names[N][16];
  uint64_t shape[1] = {ELEMS};
  gpufile_tensor tensors[N];
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < ELEMS; k++) { data[i][k] = (float)(i * ELEMS + k); }
    snprintf(names[i], sizeof names[i], "layer.%d", i);
    tensors[i] = (gpufile_tensor){names[i], "F32", shape, 1, data[i], sizeof data[i]};
  }
  const char* metadata[] = {"step", "7", NULL};
  /* 4000 bytes a tensor, at most 8000 a shard: three shards. */
  if (gpufile_save_checkpoint(argv[1], tensors, N, "8KB", metadata, 1) != GPUFILE_OK) {
    fprintf(stderr, "save failed: %s\n", last_error());
    return 1;
  }
  tensors[0].dtype = "F33";
  gpufile_status st = gpufile_save_checkpoint(argv[1], tensors, N, "8KB", NULL, 1);
  if (st != GPUFILE_BAD_ARGUMENT || !strstr(last_error(), "unknown dtype")) {
    fprintf(stderr, "a bad dtype gave %d: %s\n", (int)st, last_error());
    return 1;
  }
  printf("test_save: all passed\n");
  return 0;
}
