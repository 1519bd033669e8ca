/* Info objects (MPI 4.1 §10): key and value limits (MPI_ERR_INFO_KEY, MPI_ERR_INFO_VALUE),
 * Info_get_nthkey out of range (MPI_ERR_ARG), Info_get with a valuelen shorter than the
 * value (truncated, still found), key order kept across set/replace/delete, Info_dup
 * independence, and MPI_INFO_NULL where it is invalid (MPI_ERR_INFO, or MPI_ERR_ARG as MPICH). One process. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rc, flag, n;
    char val[MPI_MAX_INFO_VAL + 2], key[MPI_MAX_INFO_KEY + 2];
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Info info, d;
    MPI_Info_create(&info);

    memset(key, 'k', sizeof key);
    key[MPI_MAX_INFO_KEY + 1] = 0; /* MPI_MAX_INFO_KEY + 1 characters: too long */
    rc = MPI_Info_set(info, key, "v");
    CHECK_CLASS(rc, MPI_ERR_INFO_KEY, "Info_set with a key that is too long");
    rc = MPI_Info_set(info, "", "v");
    CHECK_CLASS(rc, MPI_ERR_INFO_KEY, "Info_set with an empty key");
    memset(val, 'v', sizeof val);
    val[MPI_MAX_INFO_VAL + 1] = 0;
    rc = MPI_Info_set(info, "k", val);
    CHECK_CLASS(rc, MPI_ERR_INFO_VALUE, "Info_set with a value that is too long");

    MPI_Info_set(info, "first", "0123456789");
    MPI_Info_set(info, "second", "b");
    MPI_Info_set(info, "third", "c");
    MPI_Info_set(info, "first", "again"); /* replaced in place */
    MPI_Info_delete(info, "second");
    MPI_Info_get_nkeys(info, &n);
    CHECK(n == 2, "nkeys %d", n);
    MPI_Info_get_nthkey(info, 0, key);
    CHECK(!strcmp(key, "first"), "key 0 '%s'", key);
    MPI_Info_get_nthkey(info, 1, key);
    CHECK(!strcmp(key, "third"), "key 1 '%s'", key);
    rc = MPI_Info_get_nthkey(info, 2, key);
    CHECK_CLASS(rc, MPI_ERR_ARG, "Info_get_nthkey past the end");
    memset(val, 'x', 16);
    MPI_Info_get(info, "first", 3, val, &flag);
    CHECK(flag && !strncmp(val, "aga", 3) && val[3] == 0, "truncated get: flag %d '%.5s'", flag,
          val);

    MPI_Info_dup(info, &d);
    MPI_Info_set(d, "third", "changed");
    MPI_Info_get(info, "third", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag && !strcmp(val, "c"), "Info_dup is not independent: '%s'", val);
    MPI_Info_free(&d);

    /* MPICH says MPI_ERR_ARG here */
    int cls;
    rc = MPI_Info_set(MPI_INFO_NULL, "a", "b");
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_INFO || cls == MPI_ERR_ARG, "Info_set on MPI_INFO_NULL: class %d", cls);
    rc = MPI_Info_get_nkeys(MPI_INFO_NULL, &n);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_INFO || cls == MPI_ERR_ARG, "Info_get_nkeys of MPI_INFO_NULL: %d", cls);
    MPI_Info_free(&info);
    return finish();
}
