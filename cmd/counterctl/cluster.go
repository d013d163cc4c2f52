package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/counterd/counterd/client"
)

// counterctl cluster status | cluster forget NODE [--force]
func setupCluster(fs *flag.FlagSet) runFunc {
	force := fs.Bool("force", false, "forget: also a member the node sees alive (it stops serving)")
	return func(ctx context.Context, e *env, args []string) error {
		var st *client.ClusterStatus
		var err error
		switch {
		case args[0] == "status" && len(args) == 1:
			st, err = e.c.ClusterStatus(ctx)
		case args[0] == "forget" && len(args) == 2:
			st, err = e.c.ForgetMember(ctx, args[1], *force)
		default:
			return usagef("cluster: want 'status' or 'forget NODE'")
		}
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, st)
		}
		if args[0] == "forget" {
			fmt.Fprintf(e.stdout, "forgot %s\n", args[1])
		}
		return printClusterStatus(e, st)
	}
}

func printClusterStatus(e *env, st *client.ClusterStatus) error {
	fmt.Fprintf(e.stdout, "node %s, ring version %d, replication factor %d\n", st.Self, st.RingVersion, st.ReplicationFactor)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tHTTP\tOWNERSHIP")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f%%\n", m.ID, m.State, m.HTTP, 100*m.Ownership)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Forgotten) > 0 {
		_, err := fmt.Fprintf(e.stdout, "forgotten: %s\n", strings.Join(st.Forgotten, ", "))
		return err
	}
	return nil
}
