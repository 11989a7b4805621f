module github.com/pdkv/pdkv/go

go 1.19
