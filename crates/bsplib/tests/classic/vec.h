/* A vector of length n dealt out over p processes in turn: element i (0-based) lives on
 * process i mod p, as its (i div p)-th local element. */
#include <bsp.h>

int local_length(int n, int p, int s);
double *new_vector(int len);
double dot(int n, const double *x, const double *y);
