/* Attribute caching on communicators (MPI 4.1 §7.7): copy callbacks run on MPI_Comm_dup (and
 * their flag decides whether the attribute is copied), delete callbacks run on
 * Comm_delete_attr, on replacing a value and on Comm_free; MPI_COMM_NULL_COPY_FN,
 * MPI_COMM_DUP_FN; freeing a keyval still in use. Two processes. */
#include "mtest.h"

static int copies, deletes, last_deleted;

static int copy_fn(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag)
{
    (void)c;
    (void)key;
    copies++;
    CHECK(*(int *)extra == 42, "extra state %d", *(int *)extra);
    *(MPI_Aint *)out = (MPI_Aint)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int nocopy_fn(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag)
{
    (void)c;
    (void)key;
    (void)extra;
    (void)in;
    (void)out;
    copies++;
    *flag = 0;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int key, void *val, void *extra)
{
    (void)c;
    (void)key;
    (void)extra;
    deletes++;
    last_deleted = (int)(MPI_Aint)val;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int flag;
    void *v;
    static int extra = 42;
    MPI_Init(&argc, &argv);

    int k1, k2, k3, k4;
    MPI_Comm_create_keyval(copy_fn, delete_fn, &k1, &extra);
    MPI_Comm_create_keyval(nocopy_fn, delete_fn, &k2, &extra);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k3, NULL);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, delete_fn, &k4, NULL);

    MPI_Comm a, b, c;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_set_attr(a, k1, (void *)(MPI_Aint)10);
    MPI_Comm_set_attr(a, k2, (void *)(MPI_Aint)20);
    MPI_Comm_set_attr(a, k3, (void *)(MPI_Aint)30);
    MPI_Comm_set_attr(a, k4, (void *)(MPI_Aint)40);
    CHECK(copies == 0 && deletes == 0, "callbacks before dup: %d %d", copies, deletes);

    MPI_Comm_dup(a, &b);
    CHECK(copies == 2, "copy callbacks on dup: %d, expected 2", copies);
    MPI_Comm_get_attr(b, k1, &v, &flag);
    CHECK(flag && (MPI_Aint)v == 11, "k1 on dup: flag %d value %ld", flag, (long)(MPI_Aint)v);
    MPI_Comm_get_attr(b, k2, &v, &flag);
    CHECK(!flag, "k2 (copy flag 0) was copied");
    MPI_Comm_get_attr(b, k3, &v, &flag);
    CHECK(!flag, "k3 (MPI_COMM_NULL_COPY_FN) was copied");
    MPI_Comm_get_attr(b, k4, &v, &flag);
    CHECK(flag && (MPI_Aint)v == 40, "k4 (MPI_COMM_DUP_FN): flag %d value %ld", flag,
          (long)(MPI_Aint)v);
    MPI_Comm_get_attr(a, k1, &v, &flag);
    CHECK(flag && (MPI_Aint)v == 10, "k1 on the original changed: %ld", (long)(MPI_Aint)v);

    /* Replacing a value deletes the old one; deleting runs the callback once. */
    MPI_Comm_set_attr(b, k1, (void *)(MPI_Aint)12);
    CHECK(deletes == 1 && last_deleted == 11, "replace: deletes %d last %d", deletes,
          last_deleted);
    MPI_Comm_delete_attr(b, k1);
    CHECK(deletes == 2 && last_deleted == 12, "delete_attr: deletes %d last %d", deletes,
          last_deleted);
    MPI_Comm_get_attr(b, k1, &v, &flag);
    CHECK(!flag, "k1 still there after delete_attr");

    /* Freeing the keyval: attributes stay usable, the delete callback still runs later. */
    int k1_copy = k1;
    MPI_Comm_free_keyval(&k1);
    CHECK(k1 == MPI_KEYVAL_INVALID, "free_keyval did not set MPI_KEYVAL_INVALID");
    MPI_Comm_get_attr(a, k1_copy, &v, &flag);
    CHECK(flag && (MPI_Aint)v == 10, "attribute lost after free_keyval");
    MPI_Comm_dup(a, &c); /* copies k1 (11), k2 refused, k4 */
    CHECK(copies == 4, "copy callbacks on the second dup: %d", copies);

    deletes = 0;
    MPI_Comm_free(&c); /* k1 (11), k4 */
    CHECK(deletes == 2, "Comm_free of c: %d delete callbacks, expected 2", deletes);
    deletes = 0;
    MPI_Comm_free(&b); /* k4 only */
    CHECK(deletes == 1 && last_deleted == 40, "Comm_free of b: %d delete callbacks", deletes);
    deletes = 0;
    MPI_Comm_free(&a); /* k1, k2, k4 */
    CHECK(deletes == 3, "Comm_free of a: %d delete callbacks, expected 3", deletes);

    /* An attribute on MPI_COMM_WORLD. */
    MPI_Comm_set_attr(MPI_COMM_WORLD, k2, (void *)(MPI_Aint)7);
    deletes = 0;
    MPI_Comm_delete_attr(MPI_COMM_WORLD, k2);
    CHECK(deletes == 1 && last_deleted == 7, "delete on world: %d", deletes);
    MPI_Comm_free_keyval(&k2);
    MPI_Comm_free_keyval(&k3);
    MPI_Comm_free_keyval(&k4);
    return finish();
}
