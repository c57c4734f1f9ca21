/* The one message for a versioned struct whose .size the caller did not set: `sp_stats st =
 * {0}` is the C habit, and a bare SP_ERR_INVALID does not say what is missing. A zero size is
 * refused rather than read as "the current size": a program built against an older, shorter
 * struct would then be written past its end. */
#include "internal.h"

int sp__bad_size(const char *call, const char *type, size_t got)
{
    return sp__errorf(SP_ERR_INVALID,
                      "%s: the %s's .size is %zu, %s: set .size = sizeof(%s) (or start from its "
                      "_INIT macro) before the call",
                      call, type, got, got ? "smaller than any version of it" : "not set", type);
}
