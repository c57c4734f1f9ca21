// What the C++ suites share (test_hpp.cpp, test_rmm_ref.cpp): CHECK, which counts a check and
// reports a failed one as a TAP comment with its line; a host-function gate that holds a stream
// until the test opens it; and the TAP runner of a suite's tests, one "ok"/"not ok" line each,
// on one stream that every test is given. Only the standard library and the CUDA runtime, so
// that both the build's compiler and tests/cxx/rmm.sh (g++ against the RAPIDS wheels) take it.
#ifndef SP_TESTS_CXX_TAP_HPP
#define SP_TESTS_CXX_TAP_HPP

#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>

#include <cuda_runtime_api.h>

namespace {

int failures = 0;
int checks = 0;

inline void check(bool ok, const char *what, int line)
{
    ++checks;
    if (!ok) {
        ++failures;
        std::printf("# line %d: %s\n", line, what);
    }
}
#define CHECK(cond) check((cond), #cond, __LINE__)

constexpr std::size_t MiB = std::size_t(1) << 20;

// A host function holds a stream until the test opens it.
struct gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    static void wait(void *arg)
    {
        gate *g = static_cast<gate *>(arg);
        std::unique_lock<std::mutex> lock(g->mu);
        g->cv.wait(lock, [g] { return g->open; });
    }
    void release()
    {
        {
            std::lock_guard<std::mutex> lock(mu);
            open = true;
        }
        cv.notify_all();
    }
};

// The end of a test that used s and the per-thread default stream: both synchronized (checked,
// reported at the caller's line), then released from the pools of rt (a streampool::runtime).
template <class Runtime> void release_both_streams(Runtime &rt, cudaStream_t s, int line)
{
    check(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize(s) == cudaSuccess", line);
    check(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess,
          "cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess", line);
    rt.release_stream(s);
    rt.release_stream(cudaStreamPerThread);
}

struct tap_test {
    const char *name;
    std::function<void()> run;
};

// The suite's stream (non-blocking), or a TAP "Bail out!" and false.
inline bool tap_stream(cudaStream_t *s)
{
    if (cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) == cudaSuccess)
        return true;
    std::printf("Bail out! no CUDA stream\n");
    return false;
}

// Runs the tests in their order as TAP: a test is not ok if one of its checks failed or it threw.
// Then synchronizes and destroys s; the exit status, 0 only if every check passed and s did.
template <std::size_t N> int tap_run(const tap_test (&tests)[N], cudaStream_t s)
{
    std::printf("1..%zu\n", N);
    int n = 0;
    for (auto &t : tests) {
        int before = failures;
        try {
            t.run();
        } catch (const std::exception &e) {
            ++failures;
            std::printf("# unexpected exception: %s\n", e.what());
        }
        std::printf("%s %d - %s\n", failures == before ? "ok" : "not ok", ++n, t.name);
    }
    std::printf("# %d checks\n", checks);
    bool clean = cudaStreamSynchronize(s) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess;
    return failures == 0 && clean ? 0 : 1;
}

} // namespace

#endif
