// Command reap is the scheduled sweep: expired leases, cancel grace, timeouts, retired nodes
// and stranded runs.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/reaper"
	"mediator/shared/startup"
)

func main() {
	d := startup.Init("reap")
	lambda.Start(reaper.Handler(d.Store, d.Log))
}
