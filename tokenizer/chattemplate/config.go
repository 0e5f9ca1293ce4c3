package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The files a model directory carries its chat template in.
const (
	templateFile = "chat_template.jinja"
	configFile   = "tokenizer_config.json"
)

// specialTokenNames are transformers' SPECIAL_TOKENS_ATTRIBUTES: the
// special tokens every template gets as variables when set
// (PreTrainedTokenizerBase.special_tokens_map).
var specialTokenNames = []string{
	"bos_token", "eos_token", "unk_token", "sep_token",
	"pad_token", "cls_token", "mask_token", "additional_special_tokens",
}

// ErrNoTemplate is Load's error for a model that has no chat template
// (neither chat_template.jinja nor a chat_template in
// tokenizer_config.json): a base model, which engines refuse chat requests
// for.
var ErrNoTemplate = errors.New("no chat_template")

// source is a template's text and where it came from.
type source struct {
	text string
	from string // a path, with "#name" for a named template
	vars map[string]any
}

// readSource finds the template at path (a model directory, a .jinja file
// or a tokenizer_config.json) and the special tokens beside it.
func readSource(path, name string) (*source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	dir, configPath, jinjaPath := path, "", ""
	switch {
	case fi.IsDir():
		configPath = filepath.Join(dir, configFile)
		if _, err := os.Stat(filepath.Join(dir, templateFile)); err == nil {
			jinjaPath = filepath.Join(dir, templateFile)
		}
	case strings.HasSuffix(path, ".jinja"):
		dir, jinjaPath = filepath.Dir(path), path
		configPath = filepath.Join(dir, configFile)
	default:
		dir, configPath = filepath.Dir(path), path
	}

	cfg, err := readConfig(configPath, jinjaPath == "")
	if err != nil {
		return nil, err
	}
	src := &source{vars: cfg.specialTokens()}
	if jinjaPath != "" {
		if name != "" && name != "default" {
			return nil, fmt.Errorf("%s: a .jinja file holds one template, not %q", jinjaPath, name)
		}
		b, err := os.ReadFile(jinjaPath)
		if err != nil {
			return nil, err
		}
		src.text, src.from = string(b), jinjaPath
		return src, nil
	}
	src.text, err = cfg.template(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	src.from = configPath
	if name != "" {
		src.from += "#" + name
	}
	return src, nil
}

// tokenizerConfig is the part of tokenizer_config.json a template needs.
type tokenizerConfig struct {
	raw map[string]json.RawMessage
}

// readConfig reads tokenizer_config.json; a missing file is an error only
// when it must hold the template.
func readConfig(path string, required bool) (*tokenizerConfig, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !required {
		return &tokenizerConfig{}, nil
	}
	if err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &tokenizerConfig{raw: raw}, nil
}

// template returns chat_template: the string, or from a list of
// {name, template} the one called name ("default" when empty).
func (c *tokenizerConfig) template(name string) (string, error) {
	raw, ok := c.raw["chat_template"]
	if !ok || string(raw) == "null" {
		return "", ErrNoTemplate
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if name != "" && name != "default" {
			return "", fmt.Errorf("chat_template is a single template, not a list holding %q", name)
		}
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("chat_template: want a string or a list of {name, template}: %w", err)
	}
	if name == "" {
		name = "default"
	}
	names := make([]string, len(list))
	for i, t := range list {
		if t.Name == name {
			return t.Template, nil
		}
		names[i] = t.Name
	}
	slices.Sort(names)
	return "", fmt.Errorf("no chat template named %q; available: %s", name, strings.Join(names, ", "))
}

// specialTokens returns transformers' special_tokens_map: the special
// tokens that are set and not empty, each a string (an AddedToken object
// gives its content), additional_special_tokens a list, then the
// model-specific extra_special_tokens (transformers adds their names to
// SPECIAL_TOKENS_ATTRIBUTES).
func (c *tokenizerConfig) specialTokens() map[string]any {
	vars := map[string]any{}
	for _, k := range specialTokenNames {
		if v := tokenValue(c.raw[k]); v != nil {
			vars[k] = v
		}
	}
	var extra map[string]json.RawMessage
	if json.Unmarshal(c.raw["extra_special_tokens"], &extra) == nil {
		for k, raw := range extra {
			if v := tokenValue(raw); v != nil {
				vars[k] = v
			}
		}
	}
	return vars
}

// tokenValue decodes a token as a string, an AddedToken object's content,
// or a list of them; nil when absent or empty.
func tokenValue(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil
		}
		return s
	}
	var added struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &added) == nil && added.Content != nil {
		if *added.Content == "" {
			return nil
		}
		return *added.Content
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		out := make([]any, 0, len(list))
		for _, r := range list {
			if v, ok := tokenValue(r).(string); ok {
				out = append(out, v)
			}
		}
		return out
	}
	return nil
}
