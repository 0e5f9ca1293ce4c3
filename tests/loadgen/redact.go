package loadgen

import "strings"

// redacted stands for a secret in what a run writes down (input_config,
// the command line), as aiperf 0.12.0 writes it in place of an API key or
// a credential header's value.
const redacted = "<redacted>"

// redactURL replaces a URL's user info (user:password@) by redacted, as
// aiperf 0.12 does when it writes endpoint.urls.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		return scheme + "://" + redacted + rest[at:]
	}
	return u
}

// secretHeader reports a header whose value is a credential.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "auth") || strings.Contains(n, "key") || strings.Contains(n, "token") ||
		strings.Contains(n, "secret") || strings.Contains(n, "cookie") || strings.Contains(n, "password")
}

// RedactArgs returns a command line's arguments with its secrets replaced
// by "<redacted>": the value of --api-key, a credential header's value
// (-H/--header Name:Value; a JSON object of headers naming one is replaced
// whole) and the user info of a --url. It is what a run records as its
// command line.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	for i := 0; i < len(args); i++ {
		flag, value, inline := strings.Cut(args[i], "=")
		if !inline {
			flag = args[i]
		}
		redact := redactorOf(flag)
		switch {
		case redact == nil:
			out[i] = args[i]
		case inline:
			out[i] = flag + "=" + redact(value)
		default:
			out[i] = args[i]
			if i+1 < len(args) {
				i++
				out[i] = redact(args[i])
			}
		}
	}
	return out
}

// redactorOf returns how to redact the value of a flag, nil for a flag
// whose value is not secret.
func redactorOf(flag string) func(string) string {
	switch flag {
	case "--api-key":
		return func(string) string { return redacted }
	case "-H", "--header":
		return redactHeaderArg
	case "--url", "-u":
		return func(v string) string { // comma-separated
			urls := strings.Split(v, ",")
			for i, u := range urls {
				urls[i] = redactURL(u)
			}
			return strings.Join(urls, ",")
		}
	}
	return nil
}

// redactHeaderArg redacts a -H value: Name:Value, or a JSON object.
func redactHeaderArg(v string) string {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		if secretHeader(v) {
			return redacted
		}
		return v
	}
	if name, _, ok := strings.Cut(v, ":"); ok && secretHeader(name) {
		return name + ":" + redacted
	}
	return v
}
