/* For the test helper programs that run outside cmocka (metrics_dump, trace_workload): CHECK(call)
 * exits 1, naming the call and its code, when a streampool or CUDA call does not return 0. */
#ifndef SP_EXIT_CHECK_H
#define SP_EXIT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != 0) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #call, rc_);                \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#endif
