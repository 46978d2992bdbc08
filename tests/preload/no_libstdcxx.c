/* tests/preload/no_libstdcxx.c: a C program; prints whether libstdc++ is
 * mapped into it (with libcidmalloc.so preloaded it must not be) after a
 * malloc/free, which must work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
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
