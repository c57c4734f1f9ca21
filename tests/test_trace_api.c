/* The allocation trace from C: exact CSV rows and outcomes (fresh, hit, steal, fail) for a known
 * sequence, instants for limit and trim, per-thread buffers from several threads, start/stop
 * errors, and trace:FILE in SP_ALLOC_CONF. Portable. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/fixtures.h"

static char dir[] = "/tmp/sp-trace-XXXXXX";

/* The files of the trace named `name` in the suite's directory: the CSV at that path, and the
 * JSON that the runtime writes beside it. */
typedef struct {
    char csv[64], json[80];
} trace_files;

static trace_files trace_named(const char *name)
{
    trace_files t;
    snprintf(t.csv, sizeof t.csv, "%s/%s", dir, name);
    snprintf(t.json, sizeof t.json, "%s.json", t.csv);
    return t;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* The CSV's rows without the Thread and Time columns, one per line. */
static char *rows_without_thread_and_time(const char *csv)
{
    char *out = calloc(1, strlen(csv) + 1), *o = out;
    const char *line = strchr(csv, '\n') + 1; /* after the header */
    while (*line) {
        const char *end = strchr(line, '\n');
        const char *third = strchr(strchr(line, ',') + 1, ',') + 1;
        memcpy(o, third, (size_t)(end - third + 1));
        o += end - third + 1;
        line = end + 1;
    }
    return out;
}

static void trace_records_outcomes(void **state)
{
    (void)state;
    sp_runtime *rt;
    sp_pool *pool;
    SP(sp_runtime_create(0, NULL, &rt));
    sp_pool_config cfg = SP_POOL_CONFIG_INIT;
    cfg.limit = 8 << 20;
    SP(sp_pool_create(rt, "p,1", &cfg, &pool));
    cudaStream_t s1 = new_stream(), s2 = new_stream();
    char path[64];
    snprintf(path, sizeof path, "%s/a.csv", dir);
    assert_int_equal(sp_runtime_trace_stop(rt), SP_ERR_INVALID); /* none started */
    SP(sp_runtime_trace_start(rt, path));
    assert_int_equal(sp_runtime_trace_start(rt, path), SP_ERR_BUSY);
    void *a, *b, *c, *big = NULL;
    SP(sp_alloc(pool, &a, 5000, s1));       /* fresh */
    SP(sp_free(pool, a, s1));
    SP(sp_alloc(pool, &b, 4900, s1));       /* hit: the same 5120-byte block */
    assert_ptr_equal(a, b);
    SP(sp_free(pool, b, s1));
    CK(cudaStreamSynchronize(s1));
    SP(sp_alloc(pool, &c, 5000, s2));       /* steal: s1's block behind a completed fence */
    assert_ptr_equal(c, a);
    assert_int_equal(sp_alloc(pool, &big, 16 << 20, s2), SP_ERR_NEVER_FITS); /* fail */
    SP(sp_free(pool, c, s2));
    SP(sp_pool_trim(pool, 0));
    SP(sp_runtime_trace_stop(rt));
    assert_int_equal(sp_runtime_trace_stop(rt), SP_ERR_INVALID);
    assert_int_equal(stats_of(pool).cross_stream_reuses, 1);

    char *csv = slurp(path);
    assert_non_null(strstr(csv, "Thread,Time,Action,Pointer,Size,Stream,Pool,ClassSize,Outcome,StreamName\n"));
    char expect[1024];
    snprintf(expect, sizeof expect,
             "allocate,%p,5000,%p,\"p,1\",5120,fresh,\n"
             "free,%p,5000,%p,\"p,1\",5120,free,\n"
             "allocate,%p,4900,%p,\"p,1\",5120,hit,\n"
             "free,%p,4900,%p,\"p,1\",5120,free,\n"
             "allocate,%p,5000,%p,\"p,1\",5120,steal,\n"
             "free,%p,5000,%p,\"p,1\",5120,free,\n",
             a, (void *)s1, a, (void *)s1, a, (void *)s1, a, (void *)s1, a, (void *)s2, a,
             (void *)s2);
    char *rows = rows_without_thread_and_time(csv);
    assert_string_equal(rows, expect);
    free(rows);
    free(csv);
    char jpath[80];
    snprintf(jpath, sizeof jpath, "%s.json", path);
    char *json = slurp(jpath);
    assert_non_null(strstr(json, "{\"name\":\"limit\",\"ph\":\"i\",\"s\":\"p\""));
    assert_non_null(strstr(json, "{\"name\":\"alloc failed\",\"ph\":\"i\",\"s\":\"t\""));
    assert_non_null(strstr(json, "\"status\":\"SP_ERR_NEVER_FITS\""));
    assert_non_null(strstr(json, "{\"name\":\"trim\",\"ph\":\"i\",\"s\":\"p\""));
    assert_non_null(strstr(json, "{\"name\":\"pool p,1\",\"ph\":\"C\""));
    free(json);

    /* off again: nothing more is recorded, and a new trace starts empty */
    SP(sp_alloc(pool, &a, 100, s1));
    SP(sp_runtime_trace_start(rt, path));
    SP(sp_free(pool, a, s1)); /* its allocation is not in this trace: left out */
    SP(sp_runtime_trace_stop(rt));
    csv = slurp(path);
    assert_string_equal(csv, "Thread,Time,Action,Pointer,Size,Stream,Pool,ClassSize,Outcome,StreamName\n");
    free(csv);
    drop_stream(rt, s1);
    drop_stream(rt, s2);
    SP(sp_pool_destroy(pool));
    SP(sp_runtime_destroy(rt));
    assert_int_equal(sp_runtime_trace_start(NULL, path), SP_ERR_INVALID);
}

typedef struct {
    sp_pool *pool;
    cudaStream_t stream;
} worker;

enum { PAIRS = 500, THREADS = 4 };

static void *pairs(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < PAIRS; i++) {
        void *p;
        if (sp_alloc(w->pool, &p, 1000 + (size_t)i, w->stream) != SP_OK ||
            sp_free(w->pool, p, w->stream) != SP_OK)
            return arg;
    }
    return NULL;
}

static void trace_keeps_a_buffer_per_thread(void **state)
{
    (void)state;
    trace_files tf = trace_named("threads.csv");
    SP(sp_runtime_trace_start(fx.rt, tf.csv));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){fx.pool, new_stream()};
        assert_int_equal(pthread_create(&t[i], NULL, pairs, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *res;
        pthread_join(t[i], &res);
        assert_null(res);
    }
    SP(sp_runtime_trace_stop(fx.rt));
    char *csv = slurp(tf.csv);
    /* per thread: PAIRS allocations and frees, on its own stream, in its own order */
    char *threads[THREADS] = {0};
    int rows = 0, per_thread[THREADS] = {0};
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1, rows++) {
        int k = 0;
        while (k < THREADS && threads[k] && strncmp(threads[k], line, (size_t)(strchr(line, ',') - line + 1)) != 0)
            k++;
        assert_true(k < THREADS);
        if (!threads[k])
            threads[k] = line;
        per_thread[k]++;
    }
    assert_int_equal(rows, 2 * PAIRS * THREADS);
    for (int k = 0; k < THREADS; k++)
        assert_int_equal(per_thread[k], 2 * PAIRS);
    free(csv);
    for (int i = 0; i < THREADS; i++)
        drop_stream(fx.rt, w[i].stream);
}

/* The JSON's process_name metadata names the process its events are on (pid = device + 1:
 * viewers treat pid 0 as the kernel's), or the viewer shows an unnamed process. */
static void trace_names_the_process_of_its_events(void **state)
{
    (void)state;
    trace_files tf = trace_named("pid.csv");
    cudaStream_t s = fx.a;
    SP(sp_runtime_trace_start(fx.rt, tf.csv));
    void *p;
    SP(sp_alloc(fx.pool, &p, 1000, s));
    SP(sp_free(fx.pool, p, s));
    SP(sp_runtime_trace_stop(fx.rt));
    char *json = slurp(tf.json);
    assert_non_null(strstr(json, "{\"name\":\"alloc\",\"ph\":\"i\",\"s\":\"t\",\"pid\":1,"));
    assert_non_null(strstr(json, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,"));
    assert_null(strstr(json, "\"pid\":0,"));
    free(json);
}

/* Tracing turned on and off while other threads allocate: every restart is a new trace the
 * threads look their buffers up in again, and each written trace is whole (a header, rows that
 * end in a newline, a JSON document that closes). */
typedef struct {
    worker w;
    atomic_bool *stop;
} looping;

static void *pairs_until_stopped(void *arg)
{
    looping *l = arg;
    while (!atomic_load(l->stop)) {
        void *p;
        if (sp_alloc(l->w.pool, &p, 3000, l->w.stream) != SP_OK ||
            sp_free(l->w.pool, p, l->w.stream) != SP_OK)
            return arg;
    }
    return NULL;
}

static void trace_restarts_while_threads_allocate(void **state)
{
    (void)state;
    trace_files tf = trace_named("restarts.csv");
    atomic_bool stop = false;
    pthread_t t[2];
    looping l[2];
    for (int i = 0; i < 2; i++) {
        l[i] = (looping){{fx.pool, new_stream()}, &stop};
        assert_int_equal(pthread_create(&t[i], NULL, pairs_until_stopped, &l[i]), 0);
    }
    for (int round = 0; round < 200; round++) {
        SP(sp_runtime_trace_start(fx.rt, tf.csv));
        SP(sp_runtime_trace_stop(fx.rt));
        char *csv = slurp(tf.csv);
        assert_int_equal(strncmp(csv, "Thread,Time,", 12), 0);
        assert_true(csv[strlen(csv) - 1] == '\n');
        free(csv);
        char *json = slurp(tf.json);
        assert_non_null(strstr(json, "\n]}\n"));
        free(json);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++) {
        void *res;
        pthread_join(t[i], &res);
        assert_null(res);
        drop_stream(fx.rt, l[i].w.stream);
    }
}

static void trace_from_alloc_conf(void **state)
{
    (void)state;
    char path[64], conf[96];
    snprintf(path, sizeof path, "%s/conf.csv", dir);
    snprintf(conf, sizeof conf, "cache_limit:max, trace:%s", path);
    setenv("SP_ALLOC_CONF", conf, 1);
    sp_runtime *rt;
    sp_pool *pool;
    SP(sp_runtime_create(0, NULL, &rt));
    SP(sp_runtime_default_pool(rt, &pool));
    void *p;
    SP(sp_alloc(pool, &p, 3000, 0));
    SP(sp_free(pool, p, 0));
    assert_int_equal(sp_runtime_trace_start(rt, path), SP_ERR_BUSY); /* already on */
    SP(sp_runtime_destroy(rt)); /* writes the files */
    char *csv = slurp(path);
    char *rows = rows_without_thread_and_time(csv);
    char expect[256];
    snprintf(expect, sizeof expect,
             "allocate,%p,3000,0x0,\"default\",3072,fresh,\nfree,%p,3000,0x0,\"default\",3072,free,\n",
             p, p);
    assert_string_equal(rows, expect);
    free(rows);
    free(csv);
    setenv("SP_ALLOC_CONF", "llama.trace:/tmp/x", 1);
    assert_int_equal(sp_runtime_create(0, NULL, &rt), SP_ERR_CONFIG);
    assert_non_null(strstr(sp_config_error(), "trace is set for the runtime"));
    setenv("SP_ALLOC_CONF", "trace:", 1);
    assert_int_equal(sp_runtime_create(0, NULL, &rt), SP_ERR_CONFIG);
    unsetenv("SP_ALLOC_CONF");
}

/* A trace started while 60 MiB are held (issue 27 item 7): the JSON's first counter of the pool
 * is its baseline at ts 0 with the held and reserved bytes of that moment, and the CSV's Time
 * and the JSON's ts of the same call are one time base (seconds and microseconds since the
 * start). */
static void trace_started_mid_run_records_a_baseline(void **state)
{
    (void)state;
    cudaStream_t s = fx.a;
    void *big, *p;
    SP(sp_alloc(fx.pool, &big, 60 << 20, s));
    sp_stats st = stats_of(fx.pool);
    assert_true(st.held.current >= 60u << 20);
    trace_files tf = trace_named("midrun.csv");
    SP(sp_runtime_trace_start(fx.rt, tf.csv));
    SP(sp_alloc(fx.pool, &p, 1000, s));
    SP(sp_free(fx.pool, p, s));
    SP(sp_runtime_trace_stop(fx.rt));
    char *json = slurp(tf.json);
    char expect[256];
    snprintf(expect, sizeof expect,
             "{\"name\":\"pool default\",\"ph\":\"C\",\"pid\":1,\"tid\":0,\"ts\":0.000,"
             "\"args\":{\"requested\":0,\"held\":%llu,\"reserved\":%llu}}",
             (unsigned long long)st.held.current, (unsigned long long)st.pool_reserved);
    char *first_counter = strstr(json, "\"ph\":\"C\"");
    char *base = strstr(json, expect);
    assert_non_null(base);
    assert_true(first_counter == base + strlen("{\"name\":\"pool default\","));
    /* the allocation's row and its instant: the same moment in both files */
    char *csv = slurp(tf.csv);
    char *row = strchr(csv, '\n') + 1;
    unsigned long long sec, usec;
    assert_int_equal(sscanf(strchr(row, ',') + 1, "%llu.%llu,allocate", &sec, &usec), 2);
    char *alloc = strstr(json, "{\"name\":\"alloc\",\"ph\":\"i\"");
    assert_non_null(alloc);
    unsigned long long ts_us, ts_frac;
    assert_int_equal(sscanf(strstr(alloc, "\"ts\":") + 5, "%llu.%llu", &ts_us, &ts_frac), 2);
    assert_int_equal(ts_us, sec * 1000000 + usec);
    /* its counter after it: the 60 MiB still held, the 1000 bytes requested */
    char *after = strstr(alloc, "\"ph\":\"C\"");
    assert_non_null(after);
    unsigned long long req, held;
    assert_int_equal(sscanf(strstr(after, "\"args\":"), "\"args\":{\"requested\":%llu,\"held\":%llu",
                            &req, &held), 2);
    assert_int_equal(req, 1000);
    assert_true(held >= 60u << 20);
    free(csv);
    free(json);
    SP(sp_free(fx.pool, big, s));
}

/* Stream labels are copied as the calls are recorded (issue 27 item 7): README's teardown order
 * releases the streams (forgetting their labels) before the runtime is destroyed and writes the
 * trace; every row still names its stream, a rename shows from the next call on, and a call made
 * before the stream was named has no name. */
static void trace_keeps_stream_names_set_before_release(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "%s/names.csv", dir);
    sp_runtime *rt;
    sp_pool *pool;
    SP(sp_runtime_create(0, NULL, &rt));
    SP(sp_runtime_default_pool(rt, &pool));
    SP(sp_runtime_trace_start(rt, path)); /* left on: the destroy writes it */
    cudaStream_t s1 = new_stream(), s2 = new_stream();
    void *p;
    SP(sp_alloc(pool, &p, 1000, s1)); /* not named yet */
    SP(sp_free(pool, p, s1));
    SP(sp_stream_set_name(rt, s1, "decode"));
    SP(sp_stream_set_name(rt, s2, "prefill \"x\""));
    SP(sp_alloc(pool, &p, 2000, s1));
    SP(sp_free(pool, p, s1));
    SP(sp_alloc(pool, &p, 3000, s2));
    SP(sp_free(pool, p, s2));
    SP(sp_stream_set_name(rt, s1, "decode-2"));
    SP(sp_alloc(pool, &p, 4000, s1));
    SP(sp_free(pool, p, s1));
    drop_stream(rt, s1); /* the labels are forgotten here */
    drop_stream(rt, s2);
    SP(sp_runtime_destroy(rt)); /* writes the files */
    char *csv = slurp(path);
    char *rows = rows_without_thread_and_time(csv);
    /* pointers and outcomes vary with the allocator's reuse: each row's last field, its
     * stream name, is compared */
    const char *names[] = {"", "", "\"decode\"", "\"decode\"", "\"prefill \"\"x\"\"\"",
                           "\"prefill \"\"x\"\"\"", "\"decode-2\"", "\"decode-2\""};
    int k = 0;
    for (char *line = rows; *line; line = strchr(line, '\n') + 1, k++) {
        assert_true(k < 8);
        char *end = strchr(line, '\n');
        /* the name is the field after the Outcome column: the 8th of these 8 */
        char *f = line;
        for (int c = 0; c < 7; c++) {
            if (*f == '"') { /* a quoted field */
                f++;
                while (!(f[0] == '"' && f[1] != '"'))
                    f += f[0] == '"' ? 2 : 1;
                f++;
            } else {
                while (*f != ',')
                    f++;
            }
            assert_int_equal(*f, ',');
            f++;
        }
        size_t len = (size_t)(end - f);
        if (strlen(names[k]) != len || strncmp(f, names[k], len) != 0)
            fail_msg("row %d: stream name %.*s, expected %s", k, (int)len, f, names[k]);
    }
    assert_int_equal(k, 8);
    free(rows);
    free(csv);
}

#ifdef SP_CUDASIM
typedef struct {
    sp_pool *pool;
    void *victim;
    cudaStream_t stream;
} oom_help;

static int free_victim(sp_pool *pool, size_t bytes, cudaStream_t stream, void *user)
{
    (void)pool, (void)bytes, (void)stream;
    oom_help *h = user;
    return sp_free(h->pool, h->victim, h->stream) == SP_OK;
}

/* A free the OOM callback makes inside a traced allocation is in the trace too: without it the
 * CSV would allocate that address again while it is still live. */
static void trace_records_calls_made_by_the_oom_callback(void **state)
{
    (void)state;
    CK(cudasimSetDeviceMemory(0, 64 << 20));
    sp_runtime *rt;
    sp_pool *pool;
    SP(sp_runtime_create(0, NULL, &rt));
    SP(sp_runtime_default_pool(rt, &pool));
    cudaStream_t s = new_stream();
    oom_help h = {pool, NULL, s};
    SP(sp_runtime_set_oom_callback(rt, free_victim, &h));
    trace_files tf = trace_named("oom.csv");
    SP(sp_runtime_trace_start(rt, tf.csv));
    void *big;
    SP(sp_alloc(pool, &h.victim, 40 << 20, s));
    SP(sp_alloc(pool, &big, 40 << 20, s)); /* out of memory until the callback frees victim */
    SP(sp_free(pool, big, s));
    SP(sp_runtime_trace_stop(rt));
    char *csv = slurp(tf.csv);
    char *rows = rows_without_thread_and_time(csv);
    char expect[512];
    snprintf(expect, sizeof expect,
             "allocate,%p,41943040,%p,\"default\",41943040,fresh,\n"
             "free,%p,41943040,%p,\"default\",41943040,free,\n"
             "allocate,%p,41943040,%p,\"default\",41943040,fresh,\n"
             "free,%p,41943040,%p,\"default\",41943040,free,\n",
             h.victim, (void *)s, h.victim, (void *)s, big, (void *)s, big, (void *)s);
    assert_string_equal(rows, expect);
    free(rows);
    free(csv);
    char *json = slurp(tf.json);
    assert_null(strstr(json, "\"name\":\"oom\"")); /* the retry succeeded */
    free(json);
    drop_stream(rt, s);
    SP(sp_runtime_destroy(rt));
}
#endif

static int cleanup(void **state)
{
    (void)state;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        RESET(trace_records_outcomes),
        FX(trace_keeps_a_buffer_per_thread),
        FX(trace_restarts_while_threads_allocate),
        FX(trace_names_the_process_of_its_events),
        RESET(trace_from_alloc_conf),
        FX(trace_started_mid_run_records_a_baseline),
        RESET(trace_keeps_stream_names_set_before_release),
#ifdef SP_CUDASIM
        RESET(trace_records_calls_made_by_the_oom_callback),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
