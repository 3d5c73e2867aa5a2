// Command migrate applies the schema migrations; run it before the other functions serve.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/startup"
	"mediator/shared/upkeep"
)

func main() {
	d := startup.InitMigrator("migrate")
	lambda.Start(upkeep.Migrate(d))
}
