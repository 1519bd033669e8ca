/* long double reductions for ferry-mpi's ops.rs.
 *
 * Rust has no x87 80-bit float, so MPI_LONG_DOUBLE, MPI_C_LONG_DOUBLE_COMPLEX and
 * MPI_LONG_DOUBLE_INT arithmetic is done here, in the C compiler's own long double.
 * Buffers come from users and may be unaligned: every value goes through memcpy.
 */
#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(long double) == 16, "ops.rs assumes 16-byte long double storage");

/* Operation codes shared with ops.rs. */
enum { LD_SUM = 0, LD_PROD = 1, LD_MIN = 2, LD_MAX = 3 };

static long double load(const unsigned char *p) {
    long double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void store(unsigned char *p, long double v) {
    /* Writes the 6 padding bytes of the x87 format too; nobody reads them. */
    memcpy(p, &v, sizeof v);
}

/* inout[i] = in[i] op inout[i] for n long doubles. Returns 0, or -1 for an unknown op. */
int ferry_ld_reduce(int op, const unsigned char *in, unsigned char *inout, size_t n) {
    const size_t s = sizeof(long double);
    for (size_t i = 0; i < n; i++) {
        long double a = load(in + i * s), b = load(inout + i * s), r;
        switch (op) {
        case LD_SUM: r = a + b; break;
        case LD_PROD: r = a * b; break;
        case LD_MIN: r = a < b ? a : b; break;
        case LD_MAX: r = a > b ? a : b; break;
        default: return -1;
        }
        store(inout + i * s, r);
    }
    return 0;
}

/* The same for n complex long doubles (re, im pairs): sum and product. */
int ferry_cld_reduce(int op, const unsigned char *in, unsigned char *inout, size_t n) {
    const size_t s = sizeof(long double);
    if (op == LD_SUM)
        return ferry_ld_reduce(LD_SUM, in, inout, 2 * n);
    if (op != LD_PROD)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *x = in + 2 * i * s;
        unsigned char *y = inout + 2 * i * s;
        long double ar = load(x), ai = load(x + s), br = load(y), bi = load(y + s);
        store(y, ar * br - ai * bi);
        store(y + s, ar * bi + ai * br);
    }
    return 0;
}

/* Three-way comparison of two long doubles: -1, 0, 1, or 2 when unordered (a NaN). */
int ferry_ld_cmp(const unsigned char *a, const unsigned char *b) {
    long double x = load(a), y = load(b);
    if (x < y)
        return -1;
    if (x > y)
        return 1;
    if (x == y)
        return 0;
    return 2;
}

/* Converts a double to long double storage and back, for tests on the Rust side. */
void ferry_ld_from_f64(double v, unsigned char *out) { store(out, (long double)v); }
double ferry_ld_to_f64(const unsigned char *p) { return (double)load(p); }
