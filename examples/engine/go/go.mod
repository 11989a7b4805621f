// A module that uses the pdkv Go package. cgo finds pdkv.h and libpdkv through pkg-config
// ("#cgo pkg-config: pdkv" in the package): after `cmake --install`, pdkv.pc is in
// <prefix>/lib/pkgconfig (searched by default for /usr/local and /usr; PKG_CONFIG_PATH otherwise).
// From a copy outside the repository, point the replace directive at the repository's go/
// directory (scripts/check-install.sh does: go mod edit -replace).
module example.com/pdkv-engine

go 1.19

require github.com/pdkv/pdkv/go v0.0.0

replace github.com/pdkv/pdkv/go => ../../../go
