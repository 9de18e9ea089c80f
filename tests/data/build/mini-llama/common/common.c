#include <stdio.h>
#include <stdlib.h>
#include "common.h"

void common_init(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
}
