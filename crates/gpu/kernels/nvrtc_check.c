/*
 * nvrtc_check.c — compile srtp.cu with NVRTC the way the Rust host does
 * (at run time, no system headers) and print the compiler log.
 *
 *   usage: nvrtc_check <file.cu> [extra NVRTC options...]
 *
 * Two compilations per run: a cubin for sm_90 (with ptxas --verbose so the
 * log reports registers / shared memory / spills per kernel) and PTX for
 * compute_90. Exit status 0 only if both succeed; log lines mentioning a
 * warning or an error are counted and reported.
 */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = (char*)malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* counts log lines mentioning a warning or an error */
static int count_warning_lines(const char* log) {
  int count = 0;
  const char* p = log;
  while (*p) {
    const char* e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char line[1024];
    size_t m = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, m);
    line[m] = 0;
    if (strstr(line, "warning") || strstr(line, "error")) count++;
    if (!e) break;
    p = e + 1;
  }
  return count;
}

static int compile(const char* src, const char* name, const char* arch, int cubin, int nextra, char** extra) {
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, "nvrtcCreateProgram: %s\n", nvrtcGetErrorString(r));
    return 1;
  }
  const char* opts[32];
  int no = 0;
  opts[no++] = arch;
  opts[no++] = "-default-device";
  opts[no++] = "--std=c++17";
  if (cubin) opts[no++] = "--ptxas-options=--verbose";
  for (int i = 0; i < nextra && no < 32; ++i) opts[no++] = extra[i];

  printf("=== nvrtc");
  for (int i = 0; i < no; ++i) printf(" %s", opts[i]);
  printf(" %s\n", name);

  r = nvrtcCompileProgram(prog, no, opts);
  size_t logsz = 0;
  nvrtcGetProgramLogSize(prog, &logsz);
  char* log = (char*)malloc(logsz + 1);
  nvrtcGetProgramLog(prog, log);
  log[logsz] = 0;
  printf("--- log (%zu bytes) ---\n%s%s", logsz, log, (logsz > 1 && log[strlen(log) - 1] != '\n') ? "\n" : "");
  int warn = count_warning_lines(log);
  free(log);
  printf("--- result: %s\n", nvrtcGetErrorString(r));
  int rc = r == NVRTC_SUCCESS ? 0 : 1;
  if (r == NVRTC_SUCCESS) {
    size_t sz = 0;
    if (cubin) {
      nvrtcGetCUBINSize(prog, &sz);
      printf("--- cubin size: %zu bytes\n", sz);
    } else {
      nvrtcGetPTXSize(prog, &sz);
      char* ptx = (char*)malloc(sz);
      nvrtcGetPTX(prog, ptx);
      /* quick look for local-memory use in the PTX (spills show up only in ptxas' report) */
      int entries = 0;
      for (const char* p = ptx; (p = strstr(p, ".entry ")) != NULL; p++) entries++;
      printf("--- ptx size: %zu bytes, %d entry points, %s\n", sz, entries,
             strstr(ptx, ".local") ? "uses .local" : "no .local arrays");
      free(ptx);
    }
  }
  printf("--- %d warning/error line(s) in the log\n", warn);
  nvrtcDestroyProgram(&prog);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s file.cu [nvrtc options...]\n", argv[0]);
    return 2;
  }
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  printf("NVRTC %d.%d\n", major, minor);
  char* src = read_file(argv[1]);
  if (!src) return 2;
  int rc = 0;
  rc |= compile(src, argv[1], "--gpu-architecture=sm_90", 1, argc - 2, argv + 2);
  rc |= compile(src, argv[1], "--gpu-architecture=compute_90", 0, argc - 2, argv + 2);
  free(src);
  return rc;
}
