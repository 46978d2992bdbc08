/* tests/preload/no_libstdcxx.c: a C program; prints whether libstdc++ is
 * mapped into it (with libcidmalloc.so preloaded it must not be) after a
 * malloc/free, which must work.  With the argument "new", it calls the
 * throwing operator new(size_t) (by its mangled name) with an impossible
 * size: with no libstdc++ to throw std::bad_alloc, cidmalloc must report
 * and abort. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* operator new(std::size_t); weak, so that the program does not need
 * libstdc++ (the preloaded library defines it). */
void* _Znwm(size_t size) __attribute__((weak));

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "new") == 0) {
    if (_Znwm == NULL) {
      printf("no operator new in the process\n");
      return 1;
    }
    void* p = _Znwm(SIZE_MAX / 4);
    printf("operator new returned %p\n", p);
    return 0;
  }
  char* p = malloc(100);
  if (p == NULL) return 1;
  strcpy(p, "malloc works");
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) return 1;
  char line[512];
  int mapped = 0;
  while (fgets(line, sizeof line, maps) != NULL) {
    if (strstr(line, "libstdc++") != NULL) mapped = 1;
  }
  fclose(maps);
  printf("%s; libstdc++ mapped: %s\n", p, mapped ? "yes" : "no");
  free(p);
  return 0;
}
