/* Runs a test program (argv[1..]) only where the CUDA runtime it links finds a usable device.
 * Without a driver or a device the test is skipped, not failed: exit 77, the Automake/Meson skip
 * code; with --tap a TAP "1..0 # SKIP" plan and exit 0 instead, because Meson counts any non-zero
 * exit of a TAP test as an error. Any other CUDA error fails. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

int main(int argc, char **argv)
{
    int tap = argc > 1 && strcmp(argv[1], "--tap") == 0;
    if (argc < 2 + tap) {
        fprintf(stderr, "usage: cuda_gate [--tap] PROGRAM [ARGS...]\n");
        return 2;
    }
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
        (err == cudaSuccess && count == 0)) {
        const char *why = err == cudaSuccess ? "no CUDA device" : cudaGetErrorName(err);
        if (tap) {
            printf("1..0 # SKIP %s\n", why);
            return 0;
        }
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (err != cudaSuccess) {
        fprintf(stderr, "cuda_gate: cudaGetDeviceCount: %s\n", cudaGetErrorName(err));
        return 1;
    }
    char **program = argv + 1 + tap;
    execvp(program[0], program);
    perror(program[0]);
    return 1;
}
