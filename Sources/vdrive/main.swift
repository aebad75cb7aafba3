print("vdrive")
