/* expect: signal "aborted" "SIGABRT" "was a pipe" "--unbuffered"
 * A program that prints with printf and then calls abort(), as tests do:
 * its standard output is a pipe, so stdio had buffered the line and it is
 * lost with the process, as under mpirun. The launcher says that the rank
 * aborted, that its output was a pipe, and how to keep every line. */
#include "check.h"

int main(void)
{
    bsp_begin(bsp_nprocs());
    printf("process %d got this far\n", bsp_pid());
    abort();
}
