package cli

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// versionInfo is what `peloton version -o json|yaml` prints.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the peloton version and the Go version it was built with",
		Args:  argsNamed(),
		RunE: func(*cobra.Command, []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			v := versionInfo{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if p.structured() {
				b, err := json.Marshal(v)
				if err != nil {
					return err
				}
				return p.emit(b, nil, "")
			}
			fmt.Fprintf(a.stdout, "peloton %s\n%s %s\n", v.Version, v.GoVersion, v.Platform)
			return nil
		},
	}
}
