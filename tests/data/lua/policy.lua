log_info(ffi.C.LOG_GRP_SYSTEM, 'policy script file ran')
