/* Which declarations the shared library exports: the library is built with
   hidden visibility, and only what carries OFFLOAD_LOCK_API is public. */
#ifndef OFFLOAD_LOCK_EXPORT_H
#define OFFLOAD_LOCK_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define OFFLOAD_LOCK_API __attribute__((visibility("default")))
#else
#define OFFLOAD_LOCK_API
#endif

#endif /* OFFLOAD_LOCK_EXPORT_H */
