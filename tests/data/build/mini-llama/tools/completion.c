#include <stdio.h>
#include "common.h"

int main(int argc, char ** argv) {
    common_init();
    printf("mini completion: %d args\n", argc - 1);
    return 0;
}
