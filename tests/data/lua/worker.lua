log_info(ffi.C.LOG_GRP_SYSTEM, 'worker script file ran')
