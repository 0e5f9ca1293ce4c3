package chattemplate

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// continueFinal is transformers' continue_final_message
// (utils/chat_template_utils.py, render_jinja_template): the final
// message's text (its last text part when it is a list) is found at its
// last occurrence in the rendering, and everything after it is cut. The
// message keeps its trailing whitespace when the template kept it, else the
// cut is after its stripped text. Whitespace is Python's str.strip's.
func continueFinal(rendered string, messages jinja.Value) (string, error) {
	items := messages.AsList().Items
	content, _ := items[len(items)-1].AsDict().Get("content")
	var text string
	switch {
	case content.IsString():
		text = content.AsString()
	case content.IsList():
		found := false
		for i := content.AsList().Len() - 1; i >= 0 && !found; i-- {
			part := content.AsList().Items[i]
			if part.IsDict() {
				if v, ok := part.AsDict().Get("text"); ok && v.IsString() {
					text, found = v.AsString(), true
				}
			}
		}
		if !found {
			return "", fmt.Errorf("%w: continue_final_message: no text to continue in the final message", ErrInvalidRequest)
		}
	default:
		return "", fmt.Errorf("%w: continue_final_message: the final message has no content", ErrInvalidRequest)
	}
	stripped := strings.TrimFunc(text, pyIsSpace)
	at := strings.LastIndex(rendered, stripped)
	if at < 0 {
		return "", fmt.Errorf("%w: continue_final_message: the final message does not appear in the rendered chat", ErrInvalidRequest)
	}
	kept := strings.TrimLeftFunc(text, pyIsSpace)
	if end := at + len(kept); end <= len(rendered) && rendered[at:end] == text {
		return rendered[:end], nil
	}
	return rendered[:at+len(stripped)], nil
}

// pyIsSpace is Python's str.isspace for one character: Go's unicode.IsSpace
// plus the information separators U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}
