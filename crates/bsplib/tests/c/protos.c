/* Written against the 1998 paper's prototypes, not bsp.h: every primitive, bsp_abort and
 * bsp_vabort must be functions of libbsp.so with these signatures (linked by name, called
 * through pointers). `protos` runs all of them; `protos abort` and `protos vabort` stop the
 * job through bsp_abort / bsp_vabort with a formatted message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void bsp_init(void (*spmdproc)(void), int argc, char **argv);
void bsp_begin(int maxprocs);
void bsp_end(void);
void bsp_abort(char *format, ...);
void bsp_vabort(char *format, va_list args);
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

static void (*volatile abort_fn)(char *, ...) = bsp_abort;
static void (*volatile vabort_fn)(char *, va_list) = bsp_vabort;

static void fail(char *format, ...) {
    va_list args;
    va_start(args, format);
    vabort_fn(format, args);
    va_end(args);
}

#define CHECK(c) do { if (!(c)) abort_fn("protos: %s broken on process %d\n", #c, bsp_pid()); } while (0)

static int argc_;
static char **argv_;

static void spmd(void) {
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs(), right = (p + 1) % n;
    const char *c = argc_ > 1 ? argv_[1] : "";
    if (!strcmp(c, "abort") && p == n - 1) abort_fn("stopped by %s %d %.1f\n", "bsp_abort", 42, 2.5);
    if (!strcmp(c, "vabort") && p == n - 1) fail("stopped by %s %d %.1f\n", "bsp_vabort", 43, 3.5);
    int x[2] = {0, 0}, got = -1, ts = sizeof(int), st, nm, nb, tag;
    bsp_push_reg(x, sizeof x);
    bsp_set_tagsize(&ts);
    bsp_sync();
    bsp_put(right, &p, x, 0, sizeof p);
    bsp_hpput(right, &p, x, sizeof(int), sizeof p);
    bsp_sync();
    bsp_send(right, &p, "xy", 2);
    bsp_get(right, x, 0, &got, sizeof got);
    bsp_sync();
    CHECK(got == p && x[0] == (p + n - 1) % n && x[1] == x[0]);
    bsp_hpget(right, x, sizeof(int), &got, sizeof got);
    bsp_qsize(&nm, &nb);
    CHECK(nm == 1 && nb == 2);
    bsp_get_tag(&st, &tag);
    CHECK(st == 2 && tag == (p + n - 1) % n);
    char two[1];
    bsp_move(two, 1); /* truncated to what the receiver asks for */
    CHECK(two[0] == 'x');
    void *tp, *pp;
    CHECK(bsp_hpmove(&tp, &pp) == -1);
    bsp_pop_reg(x);
    bsp_sync();
    CHECK(got == p && bsp_time() >= 0.0);
    bsp_end();
}

int main(int argc, char **argv) {
    argc_ = argc;
    argv_ = argv;
    bsp_init(spmd, argc, argv);
    spmd();
    printf("protos ok\n");
    return 0;
}
