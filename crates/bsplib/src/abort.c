/* bsp_abort and bsp_vabort, exported from libbsp.so: bsp_abort is variadic, which stable Rust
 * cannot define, so both are C; they format the message and hand it to bsp_abort_str (Rust),
 * which stops the job naming the process. */
#include <stdarg.h>
#include <stdio.h>

void bsp_abort_str(const char *message);

void bsp_vabort(const char *format, va_list args) {
    char message[1024];
    vsnprintf(message, sizeof message, format, args);
    bsp_abort_str(message);
}

void bsp_abort(const char *format, ...) {
    va_list args;
    va_start(args, format);
    bsp_vabort(format, args);
    va_end(args);
}
