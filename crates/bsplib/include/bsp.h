/* BSPlib (Hill et al., "BSPlib: The BSP programming library", Parallel Computing 1998) on ferry.
 * Link with libbsp.so (the `bspcc` wrapper does it); run with `ferry run -n P prog`. */
#ifndef FERRY_BSP_H
#define FERRY_BSP_H

#include <stdarg.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int bsp_pid_t;
typedef int bsp_nprocs_t;
typedef int bsp_size_t;

void bsp_init(void (*spmd_part)(void), int argc, char *argv[]);
void bsp_begin(int maxprocs);
void bsp_end(void);
int bsp_nprocs(void);
int bsp_pid(void);
double bsp_time(void);
void bsp_sync(void);

void bsp_push_reg(const void *ident, int size);
void bsp_pop_reg(const void *ident);
void bsp_put(int pid, const void *src, void *dst, int offset, int nbytes);
void bsp_get(int pid, const void *src, int offset, void *dst, int nbytes);
void bsp_hpput(int pid, const void *src, void *dst, int offset, int nbytes);
void bsp_hpget(int pid, const void *src, int offset, void *dst, int nbytes);

void bsp_set_tagsize(int *tag_nbytes);
void bsp_send(int pid, const void *tag, const void *payload, int payload_nbytes);
void bsp_qsize(int *nmessages, int *accum_nbytes);
void bsp_get_tag(int *status, void *tag);
void bsp_move(void *payload, int reception_nbytes);
int bsp_hpmove(void **tag_ptr_buf, void **payload_ptr_buf);

/* Stops the job with a printf-style message (bsp_vabort: with a va_list), naming the process. */
void bsp_abort(const char *format, ...);
void bsp_vabort(const char *format, va_list args);

/* Stops the job with an already formatted message (not part of the standard). */
void bsp_abort_str(const char *message);

#ifdef __cplusplus
}
#endif
#endif
