module offload-lock/compat/go

go 1.19
