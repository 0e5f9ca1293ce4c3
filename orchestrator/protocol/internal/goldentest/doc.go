// Package goldentest runs golden tests of protocol adapters: a named case
// gives an Input and files holding the client body and the ctx response;
// the whole exchange (context request, parsed Context, generation request,
// or the first error) is compared, as canonical JSON, with
// testdata/golden/<case>.json, which -update rewrites.
//
// It imports only the standard library so that it adds no dependency to
// the protocol packages; tests use it from their _test.go files.
package goldentest
