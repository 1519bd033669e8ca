/* One BSPlib rule per case, through the C API: `rules <case>`. A broken rule ends the job
 * with "RULE BROKEN"; the err_* cases must be stopped by the library, naming process and call. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, what) do { if (!(c)) bsp_abort("RULE BROKEN: %s (process %d)\n", what, bsp_pid()); } while (0)

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "err_sync_before_begin")) bsp_sync();
    if (!strcmp(c, "err_init_null")) bsp_init(NULL, argc, argv);
    if (!strcmp(c, "err_put_before_begin")) {
        int x = 0;
        bsp_put(0, &x, &x, 0, sizeof x);
    }
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs(), right = (p + 1) % n, left = (p + n - 1) % n;
    if (!strcmp(c, "reg_order")) {
        /* Matched by order: a and b swap places in memory on process 0, not in call order. */
        static int m1[4], m2[4];
        int *a = p == 0 ? m2 : m1, *b = p == 0 ? m1 : m2;
        bsp_push_reg(a, sizeof m1);
        bsp_push_reg(b, sizeof m2);
        bsp_sync();
        int v = 10 + p, w = 20 + p, z = 30;
        bsp_put(right, &v, a, 0, sizeof v);
        bsp_put(right, &w, b, sizeof(int), sizeof w);
        bsp_sync();
        CHECK(a[0] == 10 + left && b[1] == 20 + left, "registrations matched by order");
        bsp_pop_reg(b);
        bsp_put(right, &z, b, 2 * sizeof(int), sizeof z); /* pop effective at next sync */
        bsp_sync();
        CHECK(b[2] == 30, "put after pop_reg in the same superstep");
    } else if (!strcmp(c, "reg_stack") || !strcmp(c, "err_stack_uncovered")) {
        /* Registrations of one address stack: the newest is in effect, with its size; a pop
         * uncovers the one below at the next sync. */
        static int a[4];
        int v = 40 + p;
        bsp_push_reg(a, 2 * sizeof(int));
        bsp_sync();
        bsp_push_reg(a, 4 * sizeof(int));
        bsp_sync();
        bsp_put(right, &v, a, 3 * sizeof(int), sizeof v); /* inside the newer, larger one */
        bsp_pop_reg(a);
        bsp_sync();
        CHECK(a[3] == 40 + left, "put through the newest registration");
        bsp_put(right, &v, a, (c[0] == 'e' ? 3 : 1) * sizeof(int), sizeof v); /* 8 bytes now */
        bsp_sync();
        CHECK(a[1] == 40 + left, "put through the registration below");
        bsp_pop_reg(a);
    } else if (!strcmp(c, "reg_null")) {
        /* A process with nothing to offer registers NULL, keeping the order; the others'
         * areas are reached through it. */
        static int a[2];
        bsp_push_reg(p == 0 ? NULL : a, p == 0 ? 0 : (int)sizeof a);
        bsp_sync();
        if (right != 0) bsp_put(right, &p, p == 0 ? NULL : a, 0, sizeof p);
        bsp_sync();
        CHECK(p == 0 || a[0] == left, "put through a NULL registration");
        bsp_pop_reg(p == 0 ? NULL : a);
    } else if (!strcmp(c, "err_pop_mismatch")) {
        static int a[2], b[2];
        bsp_push_reg(a, sizeof a);
        bsp_push_reg(b, sizeof b);
        bsp_sync();
        bsp_pop_reg(p == 1 ? b : a); /* not the same registration everywhere */
        bsp_sync();
    } else if (!strcmp(c, "err_begin_twice")) {
        if (p == 1) bsp_begin(2);
        bsp_sync();
    } else if (!strcmp(c, "err_bad_pid")) {
        int x = 0;
        if (p == 2) bsp_send(n, NULL, &x, sizeof x); /* no process n */
        bsp_sync();
    } else if (!strcmp(c, "err_tagsize_differs")) {
        int ts = p == 1 ? 8 : 4;
        long long t = 0;
        bsp_set_tagsize(&ts); /* must be the same everywhere */
        bsp_sync();
        if (p == 1) bsp_send(right, &t, "x", 1);
        bsp_sync();
    } else if (!strcmp(c, "err_null_src")) {
        static int a[2];
        bsp_push_reg(a, sizeof a);
        bsp_sync();
        if (p == 1) bsp_put(0, NULL, a, 0, sizeof(int));
        bsp_sync();
    } else if (!strcmp(c, "err_null_tag")) {
        int ts = 1, st;
        char t = 4;
        bsp_set_tagsize(&ts);
        bsp_sync();
        bsp_send(right, &t, NULL, 0);
        bsp_sync();
        if (p == 1) bsp_get_tag(&st, NULL);
        bsp_sync();
    } else if (!strcmp(c, "err_reg_not_yet")) {
        static int a[2];
        bsp_push_reg(a, sizeof a);
        bsp_put(right, &p, a, 0, sizeof p);
        bsp_sync();
    } else if (!strcmp(c, "err_put_bounds")) {
        static int a[4];
        bsp_push_reg(a, sizeof a);
        bsp_sync();
        if (p == 1) bsp_put(0, a, a, 3 * sizeof(int), 2 * sizeof(int));
        bsp_sync();
    } else if (!strcmp(c, "err_get_bounds")) {
        static int a[4];
        int g[2];
        bsp_push_reg(a, sizeof a);
        bsp_sync();
        if (p == 1) bsp_get(0, a, 3 * sizeof(int), g, 2 * sizeof(int));
        bsp_sync();
    } else if (!strcmp(c, "err_unregistered")) {
        static int a[4], never[4];
        bsp_push_reg(a, sizeof a);
        bsp_sync();
        if (p == 1) bsp_put(0, a, never, 0, sizeof(int));
        bsp_sync();
    } else if (!strcmp(c, "err_popped")) {
        static int a[4];
        bsp_push_reg(a, sizeof a);
        bsp_sync();
        bsp_pop_reg(a);
        bsp_sync();
        bsp_put(right, a, a, 0, sizeof(int)); /* popped at the last sync */
        bsp_sync();
    } else if (!strcmp(c, "err_pop_unregistered")) {
        static int a[4];
        if (p == 2) bsp_pop_reg(a);
        bsp_sync();
    } else if (!strcmp(c, "err_end_while_sync")) {
        /* Process 0 ends while the others sync: stopped, not a wait for ever. */
        if (p == 0) {
            bsp_end();
            return 0;
        }
        bsp_sync();
    } else if (!strcmp(c, "err_no_end")) {
        if (p == 1) return 0; /* leaves main without bsp_end */
        bsp_sync();
    } else if (!strcmp(c, "err_exit_no_end")) {
        if (p == 1) exit(0); /* exits without bsp_end */
        bsp_sync();
    } else if (!strcmp(c, "err_sync_after_end")) {
        /* below */
    } else if (!strcmp(c, "err_negative")) {
        static int a[4];
        bsp_push_reg(a, sizeof a);
        bsp_sync();
        bsp_put(right, a, a, 0, -4);
    } else if (!strcmp(c, "err_mismatch")) {
        static int a[4], b[4];
        bsp_push_reg(a, sizeof a);
        if (p == 1) bsp_push_reg(b, sizeof b);
        bsp_sync();
    } else if (!strcmp(c, "put_copies")) {
        long x = 0, src = 100 + p;
        bsp_push_reg(&x, sizeof x);
        bsp_sync();
        bsp_put(right, &src, &x, 0, sizeof src);
        src = 999;
        bsp_sync();
        CHECK(x == 100 + left, "put copies its source at call time");
    } else if (!strcmp(c, "gets_before_puts")) {
        long x = 1000 + p, got = -1, v = 2000 + p;
        bsp_push_reg(&x, sizeof x);
        bsp_sync();
        bsp_put(right, &v, &x, 0, sizeof v);
        bsp_get(right, &x, 0, &got, sizeof got);
        x = 3000 + p; /* a get reads at the sync: after local writes, before the puts */
        bsp_sync();
        CHECK(got == 3000 + right, "get served at the sync, before puts");
        CHECK(x == 2000 + left, "put applied");
    } else if (!strcmp(c, "hp")) {
        int x[8], got[4], src[3] = {7, 8, p};
        for (int i = 0; i < 8; i++) x[i] = p * 100 + i;
        bsp_push_reg(x, sizeof x);
        bsp_sync();
        bsp_hpget(right, x, 2 * sizeof(int), got, 4 * sizeof(int));
        bsp_hpput(right, src, x, 5 * sizeof(int), 3 * sizeof(int));
        bsp_sync();
        for (int i = 0; i < 4; i++) CHECK(got[i] == right * 100 + 2 + i, "hpget");
        CHECK(x[5] == 7 && x[6] == 8 && x[7] == left, "hpput");
    } else if (!strcmp(c, "bsmp")) {
        int nm, nb, seen = 0, v;
        for (int q = 0; q < n; q++) bsp_send(q, NULL, &p, sizeof p);
        bsp_qsize(&nm, &nb);
        CHECK(nm == 0 && nb == 0, "no message before the sync");
        bsp_sync();
        bsp_qsize(&nm, &nb);
        CHECK(nm == n && nb == n * (int)sizeof(int), "messages after the sync");
        for (int i = 0; i < n; i++) {
            int st;
            bsp_get_tag(&st, NULL);
            CHECK(st == sizeof(int), "get_tag status");
            bsp_move(&v, sizeof v);
            seen |= 1 << v;
        }
        CHECK(seen == (1 << n) - 1, "one message from each process");
        int st;
        bsp_get_tag(&st, NULL);
        CHECK(st == -1, "empty queue");
        bsp_send(right, NULL, "hello", 5);
        bsp_sync();
        bsp_sync();
        bsp_qsize(&nm, &nb);
        CHECK(nm == 0, "messages gone two supersteps later");
    } else if (!strcmp(c, "tagsize")) {
        int ts = 4, st, tag = 0;
        bsp_set_tagsize(&ts);
        CHECK(ts == 0, "set_tagsize returns the old size");
        bsp_send(right, NULL, "a", 1); /* tag size still 0 */
        bsp_sync();
        bsp_get_tag(&st, &tag);
        CHECK(st == 1 && tag == 0, "old superstep's message has no tag");
        int t = 7 + p;
        bsp_send(right, &t, "bc", 2);
        bsp_sync();
        bsp_get_tag(&st, &tag);
        CHECK(st == 2 && tag == 7 + left, "4-byte tag");
        void *tp, *pp;
        int len = bsp_hpmove(&tp, &pp);
        CHECK(len == 2 && *(int *)tp == 7 + left && !memcmp(pp, "bc", 2), "hpmove");
        CHECK(bsp_hpmove(&tp, &pp) == -1, "hpmove on an empty queue");
    } else if (!strcmp(c, "begin_fewer")) {
        /* bsp_begin(2) in a job of more: extra processes end cleanly inside bsp_begin. */
    } else {
        bsp_abort("unknown case %s\n", c);
    }
    double t = bsp_time();
    CHECK(t >= 0, "bsp_time");
    bsp_sync();
    bsp_end();
    if (!strcmp(c, "err_sync_after_end")) bsp_sync();
    if (p == 0) printf("rules %s ok\n", c);
    return 0;
}
