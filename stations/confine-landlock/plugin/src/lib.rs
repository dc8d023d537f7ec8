//! Exports `aegis-confine-landlock` as a loadable plugin library.
aegis_station_api::export_root!(aegis_confine_landlock::plugin_module);
