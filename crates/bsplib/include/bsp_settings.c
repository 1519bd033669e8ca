/* Linked into a program by bspcc when it was given BSPlib options of the Oxford BSP toolset
 * that ferry maps onto its own settings (-fcombine-puts, -fcombine-puts-buffer, -bspfifo,
 * -fcontention-resolve; docs/bsp.md). Before main, each becomes the program's default of the
 * FERRY_BSP_* variable it maps onto: a variable set in the environment at run time wins. C and
 * C++ alike (bspc++ compiles it as C++). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200112L
#endif
#include <stdlib.h>

#define FERRY_BSPCC_TEXT_(x) #x
#define FERRY_BSPCC_TEXT(x) FERRY_BSPCC_TEXT_(x)

__attribute__((constructor)) static void ferry_bspcc_settings(void) {
#ifdef FERRY_BSPCC_COMBINE
    setenv("FERRY_BSP_COMBINE", FERRY_BSPCC_TEXT(FERRY_BSPCC_COMBINE), 0);
#endif
#ifdef FERRY_BSPCC_EARLY
    setenv("FERRY_BSP_EARLY", FERRY_BSPCC_TEXT(FERRY_BSPCC_EARLY), 0);
#endif
#ifdef FERRY_BSPCC_FIFO
    setenv("FERRY_BSP_FIFO", FERRY_BSPCC_TEXT(FERRY_BSPCC_FIFO), 0);
#endif
#ifdef FERRY_BSPCC_REORDER
    setenv("FERRY_BSP_REORDER", FERRY_BSPCC_TEXT(FERRY_BSPCC_REORDER), 0);
#endif
}
