package hf

import "errors"

func loadTiktoken(data []byte, config string) (*Tokenizer, error) {
	return nil, errors.New("tiktoken files are not supported yet")
}
