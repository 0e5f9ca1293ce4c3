package main

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// decodeHooks are the config's decoding rules beyond mapstructure's: a
// duration needs a unit (a bare 10 would be 10 ns, and every request would
// time out), and a value that does not parse says what it was.
func decodeHooks() viper.DecoderConfigOption {
	return viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(strictDuration, quotedNumber, mapstructure.StringToSliceHookFunc(",")))
}

// strictDuration decodes a duration from a string with a unit ("10s",
// "500ms"); a number is accepted only as 0.
func strictDuration(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("not a duration with a unit (for example 10s or 500ms): %q", v)
		}
		return d, nil
	case time.Duration:
		return v, nil
	}
	if from.Kind() >= reflect.Int && from.Kind() <= reflect.Float64 {
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("a duration needs a unit (for example %vs or %vms), got %v", data, data, data)
	}
	return data, nil
}

// quotedNumber decodes a whole number from a string (an environment
// variable, a quoted YAML value), saying what the string was when it is not
// one.
func quotedNumber(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() < reflect.Int || to.Kind() > reflect.Int64 || to == durationType {
		return data, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("not a whole number: %q", s)
	}
	return n, nil
}

// mapstructureKey matches the 'key' that starts each of mapstructure's
// error lines.
var mapstructureKey = regexp.MustCompile(`^'([^']*)' (.*)$`)

// decodeError turns mapstructure's multi-line report into one line per
// key, "key: what is wrong".
func decodeError(err error) error {
	var lines []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if m := mapstructureKey.FindStringSubmatch(line); m != nil {
			lines = append(lines, m[1]+": "+strings.TrimPrefix(m[2], "error decoding: "))
		}
	}
	if len(lines) == 0 {
		return err
	}
	return errors.New(strings.Join(lines, "; "))
}
