module github.com/cryptimg/cryptimg

go 1.26
