/*
 * The variadic part of libbsp: bsp_abort and bsp_vabort format their message
 * here, with the C library's printf, and hand the text to Rust, which stops
 * the job. Stable Rust cannot define variadic functions, and a C symbol would
 * not be exported from the Rust-built shared library, so the exported
 * bsp_abort and bsp_vabort are Rust trampolines that jump to the two
 * functions below (see lib.rs).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Rust: prints message, stops every process of the job, exits with status 1. */
void bulkwire_bsp_abort_message(const char *message) __attribute__((noreturn));

void bulkwire_bsp_vabort_c(const char *format, va_list args) __attribute__((noreturn));
void bulkwire_bsp_abort_c(const char *format, ...) __attribute__((noreturn));

void bulkwire_bsp_vabort_c(const char *format, va_list args)
{
    if (format == NULL)
        bulkwire_bsp_abort_message("(bsp_abort called with a null format)");
    va_list measure;
    va_copy(measure, args);
    int length = vsnprintf(NULL, 0, format, measure);
    va_end(measure);
    if (length < 0)
        bulkwire_bsp_abort_message(format);
    char *message = malloc((size_t)length + 1);
    if (message == NULL)
        bulkwire_bsp_abort_message(format);
    vsnprintf(message, (size_t)length + 1, format, args);
    bulkwire_bsp_abort_message(message);
}

void bulkwire_bsp_abort_c(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    bulkwire_bsp_vabort_c(format, args);
}
