package tokenizer

import (
	_ "github.com/ardanlabs/jinja"
	_ "golang.org/x/text/unicode/norm"
)
