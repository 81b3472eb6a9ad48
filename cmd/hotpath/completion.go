package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// runCompletion prints a completion script. The flags of each command are
// read from its own --help, so the script cannot drift from the commands.
func runCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || args[0] != "bash" {
		fmt.Fprintln(stderr, "usage: hotpath completion bash\n\nexamples:\n  source <(hotpath completion bash)\n  hotpath completion bash > /etc/bash_completion.d/hotpath")
		return errUsage
	}
	flagRE := regexp.MustCompile(`(?m)^  -(\S+)`)
	var b strings.Builder
	b.WriteString("# bash completion for hotpath; load with: source <(hotpath completion bash)\n")
	b.WriteString("_hotpath() {\n  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}\n")
	fmt.Fprintf(&b, "  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(commandNames(), " "))
	b.WriteString("  case $cmd in\n")
	for _, name := range commandNames() {
		if name == "completion" {
			b.WriteString("  completion) COMPREPLY=($(compgen -W \"bash\" -- \"$cur\"));;\n")
			continue
		}
		var help bytes.Buffer
		_ = commands[name].run(ctx, []string{"--help"}, io.Discard, &help)
		var flags []string
		for _, m := range flagRE.FindAllStringSubmatch(help.String(), -1) {
			dash := "--"
			if len(m[1]) == 1 {
				dash = "-"
			}
			flags = append(flags, dash+m[1])
		}
		fmt.Fprintf(&b, "  %s) COMPREPLY=($(compgen -W %q -- \"$cur\"));;\n", name, strings.Join(flags, " "))
	}
	b.WriteString("  esac\n  case $cur in -*) ;; *) [ ${#COMPREPLY[@]} -eq 0 ] && COMPREPLY=($(compgen -f -- \"$cur\"));; esac\n}\ncomplete -o default -F _hotpath hotpath\n")
	_, err := io.WriteString(stdout, b.String())
	return err
}
