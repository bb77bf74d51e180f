"""Rule modules of the primitive families (loaded by `jaxprtool.families`)."""
