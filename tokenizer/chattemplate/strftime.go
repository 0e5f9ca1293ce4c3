package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// strftimeNow is transformers' strftime_now(format): the current local
// time formatted by Python's strftime, for templates that print today's
// date (Llama 3.1's "Today Date: 26 Jul 2024").
func strftimeNow(now func() time.Time) func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: want one format string")
		}
		s, err := strftime(args[0].AsString(), now())
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	}
}

// strftime formats t as Python's time.strftime does in the C locale, for
// the directives in Python's documentation; others are an error.
func strftime(format string, t time.Time) (string, error) {
	var b strings.Builder
	pad := func(n, width int) { b.WriteString(fmt.Sprintf("%0*d", width, n)) }
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'd':
			pad(t.Day(), 2)
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'm':
			pad(int(t.Month()), 2)
		case 'y':
			pad(t.Year()%100, 2)
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'H':
			pad(t.Hour(), 2)
		case 'I':
			pad((t.Hour()+11)%12+1, 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'M':
			pad(t.Minute(), 2)
		case 'S':
			pad(t.Second(), 2)
		case 'f':
			pad(t.Nanosecond()/1000, 6)
		case 'j':
			pad(t.YearDay(), 3)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'e':
			b.WriteString(fmt.Sprintf("%2d", t.Day()))
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime_now: directive %%%c is not supported", format[i])
		}
	}
	return b.String(), nil
}
