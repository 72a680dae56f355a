"""Board-exact operator rewrites (one rule per file, registered in one list).

No rule ships yet: the upsample rewrites are issue #4's work. The conversion pipeline
currently exports upsampling as the model defines it.
"""
