package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// sectionAnnotation marks a flag with the config section it sets, so that
// --help lists the flags by section.
const sectionAnnotation = "duet-config-section"

// helpSections is the order of the sections in --help: the ones a user
// sets first come first; a section not listed follows in name order.
var helpSections = []string{"server", "router", "sim", "tokenizer", "cluster", "log"}

// groupFlagsInHelp makes cmd's help (and its subcommands') list local flags
// grouped by config section instead of in one alphabetical list.
func groupFlagsInHelp(cmd *cobra.Command) {
	cobra.AddTemplateFunc("groupedFlagUsages", groupedFlagUsages)
	const plain = "{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}"
	tmpl := cmd.UsageTemplate()
	if !strings.Contains(tmpl, plain) {
		panic("cobra's usage template changed: grouped flags need a new anchor") // caught by TestHelpGroupsFlagsBySection
	}
	cmd.SetUsageTemplate(strings.Replace(tmpl, plain, "{{groupedFlagUsages .LocalFlags | trimTrailingWhitespaces}}", 1))
}

// groupedFlagUsages renders fs's flags: those of no section first, then one
// block per config section, each headed by the section's name.
func groupedFlagUsages(fs *pflag.FlagSet) string {
	groups := map[string]*pflag.FlagSet{}
	fs.VisitAll(func(f *pflag.Flag) {
		section := ""
		if s := f.Annotations[sectionAnnotation]; len(s) > 0 {
			section = s[0]
		}
		if groups[section] == nil {
			groups[section] = pflag.NewFlagSet(section, pflag.ContinueOnError)
		}
		groups[section].AddFlag(f)
	})
	var b strings.Builder
	for _, section := range sectionOrder(groups) {
		if section != "" {
			fmt.Fprintf(&b, "\n%s%s flags (the config file's %s: section):\n", strings.ToUpper(section[:1]), section[1:], section)
		}
		b.WriteString(groups[section].FlagUsages())
	}
	return b.String()
}

// sectionOrder returns the sections of groups in help order.
func sectionOrder(groups map[string]*pflag.FlagSet) []string {
	var order []string
	if groups[""] != nil {
		order = append(order, "")
	}
	for _, s := range helpSections {
		if groups[s] != nil {
			order = append(order, s)
		}
	}
	var rest []string
	for s := range groups {
		if s != "" && !slices.Contains(helpSections, s) {
			rest = append(rest, s)
		}
	}
	slices.Sort(rest)
	return append(order, rest...)
}
