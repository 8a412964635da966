package main

import (
	"errors"
	"math"
	"strconv"
)

// epochValue is an -epoch flag: plain decimal digits only. flag.Uint64Var
// would take "010" as 8, "0x10" as 16 and "1_0" as 10; an epoch typed by
// an operator is fencing state, so anything but plain decimal is refused.
type epochValue uint64

var errEpochSyntax = errors.New("want plain decimal digits, without sign, leading zero, 0x, 0b, _ or spaces")

func (e *epochValue) Set(s string) error {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return errEpochSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return errEpochSyntax
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return errors.New("out of range: want plain decimal digits up to 18446744073709551615")
	}
	*e = epochValue(n)
	return nil
}

func (e *epochValue) String() string {
	if e == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*e), 10)
}

// maxPlainEpoch is the highest -epoch taken without -allow-huge-epoch.
// A recorded epoch is replaced only by a higher one and nothing lowers it:
// an epoch near 2^64 typed by mistake (an extra digit, a negative number
// read as unsigned) would refuse every writer the control plane elects
// afterwards, for good.
const maxPlainEpoch = math.MaxInt64
