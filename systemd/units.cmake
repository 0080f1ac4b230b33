# The two systemd units, made from one template (dsfs@.service.in), which differ only in the
# network: dsfs@.service for a local store, with no IP at all, and dsfs-s3@.service for a store
# in S3 (STORE=s3://...), ordered after the network is up and allowed to reach it.
# configure_dsfs_units(DIR) writes both into DIR for the binary ${DSFS_BIN}; CMakeLists.txt calls
# it at configure time (for the tests) and at install time (for the installed binary's path).
set(DSFS_UNIT_TEMPLATE ${CMAKE_CURRENT_LIST_DIR}/dsfs@.service.in)

function(configure_dsfs_units dir)
  set(DSFS_UNIT_NAME dsfs)
  set(DSFS_UNIT dsfs@.service)
  set(DSFS_UNIT_KIND
      "For a store in S3 (STORE=s3://...) use dsfs-s3@.service: this one allows no IP traffic.")
  set(DSFS_UNIT_STORE /data/imagenet.db)
  set(DSFS_UNIT_OPTIONS allow_other,cache_size=8G,log_level=info)
  set(DSFS_UNIT_ORDER After=local-fs.target)
  set(DSFS_UNIT_SOCKETS "# - Sockets: only AF_UNIX (sd_notify, syslog), no IP traffic at all.
RestrictAddressFamilies=AF_UNIX
IPAddressDeny=any")
  configure_file(${DSFS_UNIT_TEMPLATE} ${dir}/dsfs@.service @ONLY)
  set(DSFS_UNIT_NAME dsfs-s3)
  set(DSFS_UNIT dsfs-s3@.service)
  set(DSFS_UNIT_KIND
      "For a store in S3 (STORE=s3://BUCKET/PREFIX): dsfs@.service's lockdown, with the network.")
  set(DSFS_UNIT_STORE s3://imagenet/train)
  set(DSFS_UNIT_OPTIONS "allow_other,cache_dir=/var/cache/dsfs,cache_size=8G
#   (and AWS_ACCESS_KEY_ID=..., AWS_SECRET_ACCESS_KEY=..., AWS_ENDPOINT_URL=... for the store)")
  set(DSFS_UNIT_ORDER "Wants=network-online.target
After=network-online.target local-fs.target")
  set(DSFS_UNIT_SOCKETS "# - Sockets: AF_UNIX (sd_notify, syslog) and IP, to reach the object store (a drop-in with
#   IPAddressDeny=any and IPAddressAllow=<the endpoint's addresses> narrows it further).
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6")
  configure_file(${DSFS_UNIT_TEMPLATE} ${dir}/dsfs-s3@.service @ONLY)
endfunction()
