/* The reservation as its own figure (issue 20, item 2): a pool that reserves memory shows it in
 * sp_stats (reserve, reserve_idle), the JSON, the summary and the Prometheus text, so that held
 * + reserve_idle adds up to what the device has reserved for the pool, after a trim too (held
 * 0, the reservation still in use). A caller built against stats version 3 still reads its
 * shorter struct. Emulator-only: reads the cudaMemPool's reserved bytes as cudasim keeps them. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/fixtures.h"

static const size_t MiB = (size_t)1 << 20;

/* held + reserve_idle == the cudaMemPool's reserved bytes, whatever part of the reservation is
 * in use; above the reservation the idle part is 0. */
static void held_and_idle_reservation_add_up(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "kv", 0, 256 * MiB, UINT64_MAX);
    sp_stats st = stats_of(pool);
    assert_int_equal(st.version, 5);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.reserve, 256 * MiB);
    assert_int_equal(st.reserve_idle, 256 * MiB);
    assert_int_equal(st.pool_reserved, 256 * MiB);
    void *p;
    SP(sp_alloc(pool, &p, 100 * MiB, fx.a));
    st = stats_of(pool);
    assert_int_equal(st.held.current, 100 * MiB);
    assert_int_equal(st.reserve_idle, 156 * MiB);
    assert_int_equal(st.held.current + st.reserve_idle, st.pool_reserved);
    SP(sp_free(pool, p, fx.a));
    SP(sp_pool_trim(pool, 0)); /* the case: held 0, the reservation still reserved */
    st = stats_of(pool);
    assert_int_equal(st.held.current, 0);
    assert_int_equal(st.reserve_idle, 256 * MiB);
    assert_int_equal(st.pool_reserved, 256 * MiB);
    void *big;
    SP(sp_alloc(pool, &big, 300 * MiB, fx.a)); /* past the reservation: none of it idle */
    st = stats_of(pool);
    assert_int_equal(st.reserve_idle, 0);
    assert_int_equal(st.held.current, 300 * MiB);
    assert_int_equal(st.pool_reserved, 300 * MiB);
    /* the runtime's figures sum the pools' */
    sp_pool *other = pool_of(fx.rt, "other", 0, 64 * MiB, UINT64_MAX);
    (void)other;
    sp_stats rst = {.size = sizeof rst};
    SP(sp_runtime_stats(fx.rt, &rst));
    assert_int_equal(rst.reserve, 320 * MiB);
    assert_int_equal(rst.reserve_idle, 64 * MiB);
    SP(sp_free(pool, big, fx.a));
}

/* The JSON, the summary and the Prometheus text show both figures; a version-3 struct (without
 * them) is filled and rendered as far as it goes. */
static void every_output_shows_the_reservation(void **state)
{
    (void)state;
    sp_pool *pool = pool_of(fx.rt, "kv", 0, 256 * MiB, UINT64_MAX);
    SP(sp_pool_trim(pool, 0));
    sp_stats st = stats_of(pool);
    char buf[16384];
    assert_true(sp_stats_json(&st, buf, sizeof buf) < sizeof buf);
    assert_non_null(strstr(buf, ",\"reserve\":268435456,\"reserve_idle\":268435456"));
    assert_true(sp_stats_summary(&st, buf, sizeof buf) < sizeof buf);
    assert_non_null(strstr(buf, "reservation: 256.0 MiB, 256.0 MiB of it idle (reserved, not "
                                "held)\n"));
    size_t needed;
    SP(sp_runtime_metrics_prometheus(fx.rt, buf, sizeof buf, &needed));
    assert_true(needed < sizeof buf);
    assert_non_null(strstr(buf, "# TYPE streampool_reserve_idle_bytes gauge\n"
                                "streampool_reserve_idle_bytes{device=\"0\",pool=\"kv\"} 268435456\n"));
    assert_non_null(strstr(buf, "streampool_reserve_bytes{device=\"0\",pool=\"kv\"} 268435456\n"));
    /* a caller built against stats version 3 */
    sp_stats old;
    memset(&old, 0xab, sizeof old);
    old.size = offsetof(sp_stats, reserve);
    SP(sp_pool_stats(pool, &old));
    assert_int_equal(old.size, offsetof(sp_stats, reserve));
    assert_int_equal(old.reserve, 0xabababababababab); /* past its end: untouched */
    assert_int_equal(old.pool_reserved, 256 * MiB);
    assert_true(sp_stats_json(&old, buf, sizeof buf) < sizeof buf);
    assert_null(strstr(buf, "reserve\""));
    assert_non_null(strstr(buf, "\"released_streams\":0}"));
}

TEST_MAIN("tests",
    FX(held_and_idle_reservation_add_up),
    FX(every_output_shows_the_reservation)
)
