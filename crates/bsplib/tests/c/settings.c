/* Prints the FERRY_BSP_* settings that bspcc's toolset options map onto, as the program sees
 * them before bsp_begin, then runs an empty computation with them (which checks that ferry
 * takes every value). Valid C and C++ (bspc++ compiles it too). */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>

static const char *setting(const char *name) {
    const char *v = getenv(name);
    return v != NULL ? v : "unset";
}

int main(void) {
    printf("COMBINE=%s EARLY=%s FIFO=%s REORDER=%s\n", setting("FERRY_BSP_COMBINE"),
           setting("FERRY_BSP_EARLY"), setting("FERRY_BSP_FIFO"), setting("FERRY_BSP_REORDER"));
    bsp_begin(bsp_nprocs());
    bsp_sync();
    bsp_end();
    printf("settings ok\n");
    return 0;
}
