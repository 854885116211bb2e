/*
 * What the C builds of the wire's hot paths share (proxy/wire/_framing.c and the native relay,
 * proxy/_relay_loop.c): a message length, and splitter.might_be_directive.
 */
#ifndef PGNL_WIRE_SCAN_H
#define PGNL_WIRE_SCAN_H

#include <Python.h>
#include <stdint.h>

static inline uint32_t
be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int
is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* splitter.might_be_directive: after whitespace a comment opener, and "nl" in any case. */
static inline int
might_be_directive(const unsigned char *p, Py_ssize_t start, Py_ssize_t end)
{
    if (start < end && !is_space(p[start]) && p[start] != '-' && p[start] != '/')
        return 0;
    while (start < end && is_space(p[start]))
        start++;
    if (end - start < 2)
        return 0;
    if (!((p[start] == '-' && p[start + 1] == '-') || (p[start] == '/' && p[start + 1] == '*')))
        return 0;
    for (Py_ssize_t i = start; i + 1 < end; i++) {
        if ((p[i] | 0x20) == 'n' && (p[i + 1] | 0x20) == 'l')
            return 1;
    }
    return 0;
}

#endif
