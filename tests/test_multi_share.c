/* The multi suite, processes (issue 28.3): a shareable pool exported to another process (fork
 * and exec of tests/multi_importer.c), blocks exported, imported, read and written on both
 * sides; the lifetime guard: the exporter's sp_free of a block the importer holds keeps it live
 * and out of every cache until the importer releases it, closes, or is killed; the exporter's
 * limit counts what the importer holds; the importer's misuse gets its own codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/sp_test_support.h"
#include "multi_proto.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

typedef struct {
    pid_t pid;
    int sock;
} importer;

/* fork and exec of the importer, its end of a socket pair inherited as its only extra fd */
static importer start_importer(void)
{
    const char *path = getenv("SP_MULTI_IMPORTER");
    assert_non_null(path);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char fd[16];
        (void)fcntl(sv[1], F_SETFD, 0);
        snprintf(fd, sizeof fd, "%d", sv[1]);
        execl(path, "multi_importer", fd, "0", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    return (importer){pid, sv[0]};
}

static multi_reply ask(importer *im, multi_cmd c)
{
    multi_reply r = {-1000, 0};
    assert_int_equal(multi_io(im->sock, &c, sizeof c, 1), 0);
    assert_int_equal(multi_io(im->sock, &r, sizeof r, 0), 0);
    return r;
}

static int ask_rc(importer *im, uint32_t op, uint32_t index, uint32_t byte, uint64_t len)
{
    return ask(im, (multi_cmd){.op = op, .index = index, .byte = byte, .len = len}).rc;
}

static uint32_t import_block(importer *im, const sp_block_handle *h)
{
    multi_reply r = ask(im, (multi_cmd){.op = OP_IMPORT_BLOCK, .handle = *h});
    assert_int_equal(r.rc, SP_OK);
    return r.index;
}

/* The exported pool imported there: the command first, then the export's own message. */
static sp_export *export_to(sp_pool *pool, importer *im)
{
    multi_cmd c = {.op = OP_IMPORT_POOL};
    assert_int_equal(multi_io(im->sock, &c, sizeof c, 1), 0);
    sp_export *exp = NULL;
    SP(sp_pool_export(pool, im->sock, &exp));
    multi_reply r;
    assert_int_equal(multi_io(im->sock, &r, sizeof r, 0), 0);
    assert_int_equal(r.rc, SP_OK);
    return exp;
}

static void finish(importer *im)
{
    multi_cmd c = {.op = OP_EXIT};
    assert_int_equal(multi_io(im->sock, &c, sizeof c, 1), 0);
    close(im->sock);
    int status = 0;
    assert_int_equal(waitpid(im->pid, &status, 0), im->pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    im->pid = 0; /* finished: nothing left for the fixture's teardown */
}

static sp_runtime *exact_runtime(void)
{
    sp_runtime_config cfg = SP_RUNTIME_CONFIG_INIT;
    cfg.stats_flush_bytes = 0;
    return track_runtime(0, &cfg);
}

static sp_pool *shared_pool(sp_runtime *rt, const char *name, uint64_t limit)
{
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.share = SP_SHARE_POSIX_FD;
    cfg.limit = limit;
    return pool_with_config(rt, name, &cfg);
}

static void fill(void *p, int byte, size_t len, cudaStream_t s)
{
    CK(cudaMemsetAsync(p, byte, len, s));
    CK(cudaStreamSynchronize(s));
}

static void expect_bytes(const void *p, unsigned char byte, size_t len)
{
    unsigned char *host = malloc(len);
    assert_non_null(host);
    CK(cudaMemcpy(host, p, len, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < len; i++)
        if (host[i] != byte)
            fail_msg("byte %zu is %#x, not %#x", i, host[i], byte);
    free(host);
}

/* The fixture of every test here: an exact runtime, its pool "tenant" shared with POSIX fds (the
 * limit given by the test's registration, SHARE(fn, limit)), a stream, and an importer process
 * to which the pool is exported. The teardown ends the importer if the test has not (a test
 * that kills it sets im.pid to 0), then drops the stream and destroys the pool and runtime; a
 * test that failed half-way leaves what it held to teardown_runtimes. */
typedef struct {
    sp_runtime *rt;
    sp_pool *pool;
    cudaStream_t s;
    importer im;
    sp_export *exp;
} share_fixture;

static share_fixture sh;

static int share_setup(void **state)
{
    memset(&sh, 0, sizeof sh);
    sh.rt = exact_runtime();
    sh.pool = shared_pool(sh.rt, "tenant", *(const uint64_t *)*state);
    sh.s = new_stream();
    sh.im = start_importer();
    sh.exp = export_to(sh.pool, &sh.im);
    return 0;
}

static int share_teardown(void **state)
{
    if (sh.im.pid > 0)
        finish(&sh.im);
    drop_stream(sh.rt, sh.s);
    SP(sp_pool_destroy(sh.pool));
    destroy_runtime(sh.rt);
    return teardown_runtimes(state);
}

#define SHARE(fn, limit)                                                                       \
    cmocka_unit_test_prestate_setup_teardown(fn, share_setup, share_teardown,                  \
                                             &(uint64_t){(limit)})

/* Bytes both ways, a large block and two small ones of one slab (one mapping), then released:
 * the export's figures follow, and every block frees as usual. */
static void test_export_import_bytes(void **state)
{
    (void)state;
    void *big = NULL, *a = NULL, *b = NULL;
    SP(sp_alloc(sh.pool, &big, 3 * MIB, sh.s));
    SP(sp_alloc(sh.pool, &a, 4 * KIB, sh.s));
    SP(sp_alloc(sh.pool, &b, 4 * KIB, sh.s));
    fill(big, 0x5a, 3 * MIB, sh.s);
    fill(a, 0x11, 4 * KIB, sh.s);
    fill(b, 0x22, 4 * KIB, sh.s);
    sp_block_handle hbig, ha, hb;
    SP(sp_export_block(sh.exp, big, &hbig));
    SP(sp_export_block(sh.exp, a, &ha));
    SP(sp_export_block(sh.exp, b, &hb));
    assert_int_equal(hbig.bytes, 3 * MIB);
    assert_int_equal(ha.bytes, 4 * KIB);
    assert_memory_equal(ha.cuda, hb.cuda, 64); /* one slab: one driver allocation */
    assert_int_not_equal(ha.offset, hb.offset);
    uint32_t ibig = import_block(&sh.im, &hbig), ia = import_block(&sh.im, &ha),
             ib = import_block(&sh.im, &hb);
    assert_int_equal(ask_rc(&sh.im, OP_CHECK, ibig, 0x5a, 3 * MIB), 0);
    assert_int_equal(ask_rc(&sh.im, OP_CHECK, ia, 0x11, 4 * KIB), 0);
    assert_int_equal(ask_rc(&sh.im, OP_CHECK, ib, 0x22, 4 * KIB), 0);
    assert_int_equal(ask_rc(&sh.im, OP_FILL, ibig, 0x77, 3 * MIB), 0);
    assert_int_equal(ask_rc(&sh.im, OP_FILL, ia, 0x66, 4 * KIB), 0);
    expect_bytes(big, 0x77, 3 * MIB);
    expect_bytes(a, 0x66, 4 * KIB);
    expect_bytes(b, 0x22, 4 * KIB);
    sp_stats st = stats_of(sh.pool);
    assert_int_equal(st.importers, 1);
    assert_int_equal(st.imported_blocks, 3);
    assert_int_equal(st.importer_held, 0);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, ibig, 0, 0), SP_OK);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, ia, 0, 0), SP_OK);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, ib, 0, 0), SP_OK);
    assert_int_equal(stats_of(sh.pool).imported_blocks, 0);
    SP(sp_free(sh.pool, big, sh.s));
    SP(sp_free(sh.pool, a, sh.s));
    SP(sp_free(sh.pool, b, sh.s));
    st = stats_of(sh.pool);
    assert_int_equal(st.importer_held, 0);
    assert_int_equal(st.active.current, 0);
    char json[4096];
    sp_stats_json(&st, json, sizeof json);
    assert_non_null(strstr(json, "\"importers\":1,\"imported_blocks\":0,\"importer_held\":0"));
    finish(&sh.im);
    assert_int_equal(stats_of(sh.pool).importers, 0); /* its end closed at its exit */
}

/* The guard: freed by the exporter while imported, the block stays live, held, out of every
 * cache (the next allocation gets other memory), and the importer's bytes stay; a second free
 * is a double free. Released, the next poll frees it onto its stream, which reuses it. */
static void test_free_held_until_release(void **state)
{
    (void)state;
    void *p = NULL;
    SP(sp_alloc(sh.pool, &p, 3 * MIB, sh.s));
    fill(p, 0x5a, 3 * MIB, sh.s);
    sp_block_handle h;
    SP(sp_export_block(sh.exp, p, &h));
    uint32_t i = import_block(&sh.im, &h);
    SP(sp_free(sh.pool, p, sh.s));
    sp_stats st = stats_of(sh.pool);
    assert_int_equal(st.importer_held, 1);
    assert_int_equal(st.importer_held_bytes, 3 * MIB);
    assert_int_equal(st.active.current, 3 * MIB);
    assert_int_equal(st.frees, 0);
    assert_int_equal(sp_free(sh.pool, p, sh.s), SP_ERR_DOUBLE_FREE);
    sp_ptr_info info = {.size = sizeof info};
    SP(sp_pointer_info(sh.rt, p, &info));
    assert_int_equal(info.state, SP_POINTER_LIVE);
    void *other = NULL;
    SP(sp_alloc(sh.pool, &other, 3 * MIB, sh.s));
    assert_ptr_not_equal(other, p);
    fill(other, 0x01, 3 * MIB, sh.s);
    size_t freed = 99;
    SP(sp_pool_share_poll(sh.pool, &freed));
    assert_int_equal(freed, 0);
    assert_int_equal(ask_rc(&sh.im, OP_CHECK, i, 0x5a, 3 * MIB), 0);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, i, 0, 0), SP_OK);
    SP(sp_pool_share_poll(sh.pool, &freed));
    assert_int_equal(freed, 1);
    st = stats_of(sh.pool);
    assert_int_equal(st.importer_held, 0);
    assert_int_equal(st.importer_held_bytes, 0);
    assert_int_equal(st.importer_reclaims, 0);
    assert_int_equal(st.frees, 1);
    assert_int_equal(st.active.current, 3 * MIB);
    void *again = NULL;
    SP(sp_alloc(sh.pool, &again, 3 * MIB, sh.s));
    assert_ptr_equal(again, p);
    /* stale now: the exporter freed the block it named */
    assert_int_equal(ask(&sh.im, (multi_cmd){.op = OP_IMPORT_BLOCK, .handle = h}).rc,
                     SP_ERR_STALE_HANDLE);
    SP(sp_free(sh.pool, again, sh.s));
    SP(sp_free(sh.pool, other, sh.s));
}

/* A killed importer: the exporter's next look finds its end of the pair closed; the block it
 * held is freed at the next poll, another it still had imported frees at once, both counted as
 * reclaims; a trim then gives every byte back and the pool is destroyed. */
static void test_importer_killed(void **state)
{
    (void)state;
    void *p = NULL, *q = NULL;
    SP(sp_alloc(sh.pool, &p, 3 * MIB, sh.s));
    SP(sp_alloc(sh.pool, &q, 16 * KIB, sh.s));
    sp_block_handle hp, hq;
    SP(sp_export_block(sh.exp, p, &hp));
    SP(sp_export_block(sh.exp, q, &hq));
    (void)import_block(&sh.im, &hp);
    (void)import_block(&sh.im, &hq);
    SP(sp_free(sh.pool, p, sh.s));
    assert_int_equal(stats_of(sh.pool).importer_held, 1);
    assert_int_equal(kill(sh.im.pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(sh.im.pid, &status, 0), sh.im.pid);
    assert_true(WIFSIGNALED(status));
    close(sh.im.sock);
    sh.im.pid = 0; /* gone: nothing for the teardown to finish */
    size_t freed = 0;
    SP(sp_pool_share_poll(sh.pool, &freed));
    assert_int_equal(freed, 1);
    SP(sp_free(sh.pool, q, sh.s)); /* its importer is gone: freed at once */
    sp_stats st = stats_of(sh.pool);
    assert_int_equal(st.importers, 0);
    assert_int_equal(st.importer_held, 0);
    assert_int_equal(st.importer_reclaims, 2);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.frees, 2);
    CK(cudaStreamSynchronize(sh.s));
    SP(sp_pool_trim(sh.pool, 0));
    assert_int_equal(stats_of(sh.pool).held.current, 0);
    assert_int_equal(sp_export_block(sh.exp, p, &hp), SP_ERR_BAD_POINTER);
}

/* The importer closes its import: its imports are released (not reclaims), the held block
 * frees at the next poll. */
static void test_importer_closes(void **state)
{
    (void)state;
    void *p = NULL;
    SP(sp_alloc(sh.pool, &p, 64 * KIB, sh.s));
    sp_block_handle h;
    SP(sp_export_block(sh.exp, p, &h));
    (void)import_block(&sh.im, &h);
    (void)import_block(&sh.im, &h); /* twice: two imports to release */
    SP(sp_free(sh.pool, p, sh.s));
    assert_int_equal(stats_of(sh.pool).importer_held, 1);
    assert_int_equal(ask_rc(&sh.im, OP_CLOSE, 0, 0, 0), SP_OK);
    size_t freed = 0;
    SP(sp_pool_share_poll(sh.pool, &freed));
    assert_int_equal(freed, 1);
    sp_stats st = stats_of(sh.pool);
    assert_int_equal(st.importer_reclaims, 0);
    assert_int_equal(st.importers, 0);
    assert_int_equal(st.active.current, 0);
}

/* The tenant's limit counts what the importer holds: a block freed but held leaves no room;
 * released and polled, it does. */
static void test_limit_counts_held(void **state)
{
    (void)state;
    void *p = NULL, *q = NULL;
    SP(sp_alloc(sh.pool, &p, 6 * MIB, sh.s));
    sp_block_handle h;
    SP(sp_export_block(sh.exp, p, &h));
    uint32_t i = import_block(&sh.im, &h);
    SP(sp_free(sh.pool, p, sh.s));
    assert_int_equal(sp_alloc(sh.pool, &q, 4 * MIB, sh.s), SP_ERR_LIMIT);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, i, 0, 0), SP_OK);
    SP(sp_pool_share_poll(sh.pool, NULL));
    SP(sp_alloc(sh.pool, &q, 4 * MIB, sh.s));
    SP(sp_free(sh.pool, q, sh.s));
}

/* The importer's misuse and the exporter's: each refused with its code, nothing changed. */
static void test_misuse(void **state)
{
    (void)state;
    sp_pool *other = shared_pool(sh.rt, "other", 0);
    sp_pool *plain = NULL;
    SP(sp_pool_create(sh.rt, "plain", NULL, &plain));
    int spare[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, spare), 0);
    sp_export *none = NULL;
    assert_int_equal(sp_pool_export(plain, spare[0], &none), SP_ERR_NOT_SUPPORTED);
    sp_export *exp_other = NULL;
    SP(sp_pool_export(other, spare[0], &exp_other)); /* to no importer we run */
    void *p = NULL, *o = NULL, *x = NULL;
    SP(sp_alloc(sh.pool, &p, 8 * KIB, sh.s));
    SP(sp_alloc(other, &o, 8 * KIB, sh.s));
    SP(sp_alloc(sh.pool, &x, 8 * KIB, sh.s));
    sp_block_handle h, ho, hx;
    assert_int_equal(sp_export_block(sh.exp, o, &h), SP_ERR_WRONG_POOL);
    assert_int_equal(sp_export_block(sh.exp, (char *)p + 256, &h), SP_ERR_BAD_POINTER);
    /* a request's allocation: its end would free it under the importer */
    sp_request req;
    void *r = NULL;
    SP(sp_request_begin(sh.pool, sh.s, "req", &req));
    SP(sp_request_alloc(sh.pool, req, &r, 8 * KIB));
    assert_int_equal(sp_export_block(sh.exp, r, &h), SP_ERR_NOT_SUPPORTED);
    SP(sp_request_end(sh.pool, req, 0, NULL));
    SP(sp_export_block(sh.exp, p, &h));
    SP(sp_export_block(exp_other, o, &ho));
    SP(sp_export_block(sh.exp, x, &hx));
    /* a handle of another pool's export, and one of ours with its token changed */
    assert_int_equal(ask(&sh.im, (multi_cmd){.op = OP_IMPORT_BLOCK, .handle = ho}).rc,
                     SP_ERR_FOREIGN_HANDLE);
    sp_block_handle forged = h;
    forged.token ^= 1;
    assert_int_equal(ask(&sh.im, (multi_cmd){.op = OP_IMPORT_BLOCK, .handle = forged}).rc,
                     SP_ERR_FOREIGN_HANDLE);
    forged = h;
    forged.gen += 1;
    assert_int_equal(ask(&sh.im, (multi_cmd){.op = OP_IMPORT_BLOCK, .handle = forged}).rc,
                     SP_ERR_STALE_HANDLE);
    /* freed before the import: stale */
    SP(sp_free(sh.pool, x, sh.s));
    assert_int_equal(stats_of(sh.pool).importer_held, 0);
    assert_int_equal(ask(&sh.im, (multi_cmd){.op = OP_IMPORT_BLOCK, .handle = hx}).rc,
                     SP_ERR_STALE_HANDLE);
    /* a double release, and a pointer never imported */
    uint32_t i = import_block(&sh.im, &h);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, i, 0, 0), SP_OK);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE, i, 0, 0), SP_ERR_IMPORT_RELEASED);
    assert_int_equal(ask_rc(&sh.im, OP_RELEASE_PTR, 0, 0, 0x1000), SP_ERR_BAD_POINTER);
    assert_int_equal(stats_of(sh.pool).imported_blocks, 0);
    SP(sp_free(sh.pool, p, sh.s));
    SP(sp_free(other, o, sh.s));
    assert_int_equal(stats_of(sh.pool).importer_held, 0);
    assert_int_equal(stats_of(other).importer_held, 0);
    close(spare[0]);
    close(spare[1]);
    SP(sp_pool_destroy(other));
    SP(sp_pool_destroy(plain));
}

/* Threads on their own streams export, free and poll at once while the importer imports and
 * releases between them: every block is freed exactly once, nothing stays held or live. */
typedef struct {
    sp_pool *pool;
    sp_export *exp;
    importer *im;
    pthread_mutex_t *talk; /* one command at a time on the importer's socket */
    int failures;
} share_job;

#define JOB_THREADS 4
#define JOB_ROUNDS 50

static void share_worker(void *arg, cudaStream_t s)
{
    share_job *j = arg;
    for (int i = 0; i < JOB_ROUNDS; i++) {
        void *p = NULL;
        sp_block_handle h;
        size_t bytes = (i % 2) ? 64 * KIB : 3 * MIB;
        if (sp_alloc(j->pool, &p, bytes, s) != SP_OK || sp_export_block(j->exp, p, &h) != SP_OK) {
            j->failures++;
            continue;
        }
        pthread_mutex_lock(j->talk);
        multi_cmd c = {.op = OP_IMPORT_BLOCK, .handle = h};
        multi_reply r = {-1, 0};
        bool ok = multi_io(j->im->sock, &c, sizeof c, 1) == 0 &&
                  multi_io(j->im->sock, &r, sizeof r, 0) == 0 && r.rc == SP_OK;
        pthread_mutex_unlock(j->talk);
        j->failures += !ok;
        j->failures += sp_free(j->pool, p, s) != SP_OK; /* held: imported */
        pthread_mutex_lock(j->talk);
        c = (multi_cmd){.op = OP_RELEASE, .index = r.index};
        ok = ok && multi_io(j->im->sock, &c, sizeof c, 1) == 0 &&
             multi_io(j->im->sock, &r, sizeof r, 0) == 0 && r.rc == SP_OK;
        pthread_mutex_unlock(j->talk);
        j->failures += !ok;
        j->failures += sp_pool_share_poll(j->pool, NULL) != SP_OK;
    }
    (void)cudaStreamSynchronize(s);
    j->failures += sp_stream_release(sh.rt, s) != SP_OK;
    (void)cudaStreamDestroy(s);
}

static void test_threads_share(void **state)
{
    (void)state;
    pthread_mutex_t talk = PTHREAD_MUTEX_INITIALIZER;
    share_job jobs[JOB_THREADS];
    stream_thread th[JOB_THREADS];
    for (int i = 0; i < JOB_THREADS; i++) {
        jobs[i] = (share_job){sh.pool, sh.exp, &sh.im, &talk, 0};
        stream_thread_start(&th[i], share_worker, &jobs[i]);
    }
    for (int i = 0; i < JOB_THREADS; i++) {
        stream_thread_join(&th[i]);
        assert_int_equal(jobs[i].failures, 0);
    }
    SP(sp_pool_share_poll(sh.pool, NULL)); /* what the last polls left */
    sp_stats st = stats_of(sh.pool);
    assert_int_equal(st.importer_held, 0);
    assert_int_equal(st.imported_blocks, 0);
    assert_int_equal(st.active.current, 0);
    assert_int_equal(st.frees, JOB_THREADS * JOB_ROUNDS);
    assert_int_equal(st.allocs, JOB_THREADS * JOB_ROUNDS);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        SHARE(test_export_import_bytes, 64 * MIB),
        SHARE(test_free_held_until_release, 0),
        SHARE(test_importer_killed, 0),
        SHARE(test_importer_closes, 0),
        SHARE(test_limit_counts_held, 8 * MIB),
        SHARE(test_misuse, 0),
        SHARE(test_threads_share, 0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
