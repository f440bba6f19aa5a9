module offload-lock/tests/interop/gpulease

go 1.19
