/* gpufile_save_file from C: three host tensors saved as one safetensors file at argv[1] with
 * metadata, then refusals (a size its shape does not make, a name given twice, a NULL path),
 * each GPUFILE_BAD_ARGUMENT with the file as it was. The test that runs it (tests/c_api.rs)
 * reads the file back with the core's reader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufile/gpufile.h"

static const char* last_error(void)
{
  static char buf[1024];
  gpufile_last_error_message(buf, sizeof buf);
  return buf;
}

/* The file's bytes (malloc'ed, *len set), or NULL. */
static unsigned char* slurp(const char* path, long* len)
{
  FILE* f = fopen(path, "rb");
  if (f == NULL) { return NULL; }
  fseek(f, 0, SEEK_END);
  *len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = malloc((size_t)*len + 1);
  if (buf != NULL && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

static int refused(const char* what, gpufile_status st, const char* words)
{
  if (st != GPUFILE_BAD_ARGUMENT || strstr(last_error(), words) == NULL) {
    fprintf(stderr, "%s gave %d: %s\n", what, (int)st, last_error());
    return 0;
  }
  return 1;
}

int main(int argc, char** argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  static float w[2][3] = {{1, 2, 3}, {4, 5, 6}};
  static int64_t steps[4] = {7, -1, 1LL << 40, 0};
  static uint8_t flags[5] = {1, 0, 1, 1, 0};
  uint64_t w_shape[2] = {2, 3}, steps_shape[1] = {4}, flags_shape[1] = {5};
  gpufile_tensor tensors[3] = {
    {"w", "F32", w_shape, 2, w, sizeof w},
    {"steps", "I64", steps_shape, 1, steps, sizeof steps},
    {"flags", "U8", flags_shape, 1, flags, sizeof flags},
  };
  const char* metadata[] = {"format", "pt", "step", "7", NULL};
  if (gpufile_save_file(argv[1], tensors, 3, metadata, 1) != GPUFILE_OK) {
    fprintf(stderr, "save failed: %s\n", last_error());
    return 1;
  }
  long saved_len = 0;
  unsigned char* saved = slurp(argv[1], &saved_len);
  if (saved == NULL) {
    fprintf(stderr, "cannot read %s back\n", argv[1]);
    return 1;
  }

  gpufile_tensor bad = tensors[0];
  bad.size = 20; /* [2, 3] of F32 is 24 bytes */
  if (!refused("a short tensor", gpufile_save_file(argv[1], &bad, 1, NULL, 1), "needs 24 bytes")) {
    return 1;
  }
  gpufile_tensor twice[2] = {tensors[1], tensors[1]};
  if (!refused("a name given twice", gpufile_save_file(argv[1], twice, 2, NULL, 1), "twice")) {
    return 1;
  }
  if (!refused("a NULL path", gpufile_save_file(NULL, tensors, 3, NULL, 1), "path is NULL")) {
    return 1;
  }
  long now_len = 0;
  unsigned char* now = slurp(argv[1], &now_len);
  if (now == NULL || now_len != saved_len || memcmp(now, saved, (size_t)saved_len) != 0) {
    fprintf(stderr, "a refused save changed %s\n", argv[1]);
    return 1;
  }
  free(now);
  free(saved);
  printf("test_save_file: all passed\n");
  return 0;
}
