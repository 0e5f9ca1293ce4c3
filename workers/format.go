package workers

import (
	"fmt"
	"io"
	"strings"
)

// WriteScript writes the plan as a POSIX shell script that does what the
// launch does (without health checks, supervision or restarts): create the
// run directory, write the generated files, start every worker in the
// background with its environment and log file. It is the dry-run output.
func (p *Plan) WriteScript(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# duet fleet plan: %d workers, run_dir %s\n", len(p.Workers), p.RunDir)
	if p.RunDir == AutoRunDir {
		b.WriteString("# (run_dir is empty in the config: a fresh directory is created at launch)\n")
	}
	fmt.Fprintf(&b, "mkdir -p %s\n", shellQuote(p.RunDir))
	for _, f := range p.Files {
		content := string(f.Content)
		if !strings.HasSuffix(content, "\n") {
			content += "\n"
		}
		fmt.Fprintf(&b, "cat > %s <<'DUET_EOF'\n%sDUET_EOF\n", shellQuote(f.Path), content)
	}
	for _, s := range p.Workers {
		if s.External {
			fmt.Fprintf(&b, "# %s: %s, pre-launched at %s (health-checked only)\n", s.Name, s.Role, s.URL)
			continue
		}
		gpus := strings.Join(s.GPUs, ",")
		if gpus == "" {
			gpus = "none"
		}
		fmt.Fprintf(&b, "# %s: %s, %s, %s, gpus %s", s.Name, s.Role, s.Engine, s.URL, gpus)
		if s.SidePort != 0 {
			fmt.Fprintf(&b, ", side port %d", s.SidePort)
		}
		fmt.Fprintf(&b, ", health %s within %s\n", s.HealthPath, s.StartTimeout)
		for _, kv := range s.Env {
			k, v, _ := strings.Cut(kv, "=")
			fmt.Fprintf(&b, "%s=%s ", k, shellQuote(v))
		}
		for i, a := range s.Argv {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(shellQuote(a))
		}
		fmt.Fprintf(&b, " > %s 2>&1 &\n", shellQuote(s.LogPath))
	}
	b.WriteString("wait\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_@%+=:,./-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
